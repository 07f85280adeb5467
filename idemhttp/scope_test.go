package idemhttp_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// TestKeyedHeaderScope: the scope is the HMAC of the header under the secret (another secret,
// another scope; never the bare SHA-256), a request without the header is anonymous, and one
// that sends it twice is refused.
func TestKeyedHeaderScope(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef")
	scope := idemhttp.KeyedHeaderScope("x-api-key", secret)
	r := httptest.NewRequest("POST", "/", nil)
	if s, err := scope(r); s != "" || err != nil {
		t.Fatalf("no header: %q %v", s, err)
	}
	r.Header.Set("X-API-Key", "sk_live_1")
	s, err := scope(r)
	bare := sha256.Sum256([]byte("sk_live_1"))
	switch {
	case err != nil:
		t.Fatal(err)
	case s != idemhttp.KeyedHashScope(secret, "sk_live_1") || !idemhttp.ValidScope(s) || len(s) != 64:
		t.Fatalf("scope %q", s)
	case s == hex.EncodeToString(bare[:]) || strings.Contains(s, "sk_live"):
		t.Fatalf("scope %q is the unkeyed hash or the credential", s)
	case s == idemhttp.KeyedHashScope([]byte("fedcba9876543210"), "sk_live_1"):
		t.Fatal("two secrets give one scope")
	}
	r.Header.Add("X-API-Key", "sk_live_2")
	for name, f := range map[string]idemhttp.ScopeFunc{"keyed": scope, "unkeyed": idemhttp.HeaderScope("X-API-Key")} {
		if _, err := f(r); !errors.Is(err, idemhttp.ErrInvalidScope) {
			t.Errorf("%s: a header sent twice: %v, want ErrInvalidScope", name, err)
		}
	}
}
