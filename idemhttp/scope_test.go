package idemhttp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
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

// TestKeyedStorageKey: the storage key computed from a header value and a client key is the
// one the middleware stored the request under, and no other tenant's; an empty secret or an
// invalid key is refused.
func TestKeyedStorageKey(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef")
	st := memstore.New()
	b := setup(t, st, idem.Options{}, idemhttp.Options{Scope: idemhttp.KeyedHeaderScope("X-API-Key", secret)},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	if r := b.do("POST", "/", "k-1", "a", "X-API-Key", "sk_live_1"); r.Status != 201 {
		t.Fatalf("status %d %v", r.Status, r.Err)
	}
	if r := b.do("POST", "/", "k-2", "a"); r.Status != 201 {
		t.Fatalf("status %d %v", r.Status, r.Err)
	}
	ctx := context.Background()
	key, err := idemhttp.KeyedStorageKey(secret, "sk_live_1", "k-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Get(ctx, key); err != nil || rec.Response == nil || rec.Response.Status != 201 {
		t.Fatalf("Get(%q) = %+v, %v: not the record the middleware stored", key, rec, err)
	}
	for _, other := range []string{"sk_live_2", ""} {
		k, _ := idemhttp.KeyedStorageKey(secret, other, "k-1")
		if _, err := st.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("scope value %q finds the record of sk_live_1: %v", other, err)
		}
	}
	if k, _ := idemhttp.KeyedStorageKey(secret, "sk_live_1", "k-1"); k != idemhttp.StorageKey(idemhttp.KeyedHashScope(secret, "sk_live_1"), "k-1") {
		t.Errorf("KeyedStorageKey = %q", k)
	}
	if _, err := st.Get(ctx, idemhttp.StorageKey("", "k-2")); err != nil {
		t.Errorf("a request without the header is stored under the anonymous scope: %v", err)
	}
	for _, c := range []struct {
		secret []byte
		key    string
	}{{nil, "k-1"}, {secret, ""}, {secret, "k\n1"}, {secret, strings.Repeat("k", idem.MaxClientKeyLen+1)}} {
		if _, err := idemhttp.KeyedStorageKey(c.secret, "v", c.key); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("KeyedStorageKey(%q, v, %q): %v, want ErrInvalidInput", c.secret, c.key, err)
		}
	}
}

// TestScopeRequired: New refuses options without a scope decision, with the Engine and with a
// Runner, since one scope for every caller hands one caller's stored response to another who
// sends the same key and body. SingleCaller is the explicit choice of one trusted caller.
func TestScopeRequired(t *testing.T) {
	t.Parallel()
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]idemhttp.Options{
		"Runner": {Runner: eng},
	} {
		_, err := idemhttp.New(opt)
		if !errors.Is(err, idem.ErrInvalidInput) ||
			!strings.Contains(err.Error(), "idemhttp: invalid options: Options.Scope") {
			t.Errorf("%s without Scope: err %v, want idem.ErrInvalidInput naming idemhttp: invalid options: Options.Scope", name, err)
		}
		opt.Scope = idemhttp.SingleCaller()
		if _, err := idemhttp.New(opt); err != nil {
			t.Errorf("%s with SingleCaller: %v", name, err)
		}
	}
}

// TestSingleCaller: every request, whatever it sends, is in the one scope "".
func TestSingleCaller(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", "Bearer alice")
	if s, err := idemhttp.SingleCaller()(r); s != "" || err != nil {
		t.Fatalf("SingleCaller: %q %v, want the scope \"\"", s, err)
	}
}

// TestScopeHeaderSpelling: HeaderScope and KeyedHeaderScope refuse a request that carries the
// scope header spelled with underscores for hyphens (X_API_KEY for X-API-Key), which servers
// that follow CGI's naming read as the scope header: alone it would make the caller anonymous
// to the scope while the application knows it. The middleware answers 400 with
// ProblemScopeHeaderSpelling and does not run the handler.
func TestScopeHeaderSpelling(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef")
	for name, f := range map[string]idemhttp.ScopeFunc{
		"keyed": idemhttp.KeyedHeaderScope("X-API-Key", secret), "unkeyed": idemhttp.HeaderScope("X-API-Key"),
	} {
		for _, hdrs := range [][]string{{"X_API_KEY"}, {"x_api_key"}, {"X_Api-Key"}, {"X-API-Key", "X_API_KEY"}} {
			r := httptest.NewRequest("POST", "/", nil)
			for _, h := range hdrs {
				r.Header.Add(h, "sk_live_1") // as net/http stores it
			}
			s, err := f(r)
			if !errors.Is(err, idemhttp.ErrScopeHeaderSpelling) || !errors.Is(err, idemhttp.ErrInvalidScope) || s != "" {
				t.Errorf("%s with %v: %q, %v; want ErrScopeHeaderSpelling", name, hdrs, s, err)
			}
		}
		// Other headers that only look alike are not refused.
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("X-API-Key", "sk_live_1")
		r.Header.Set("X-API-Keys", "x")
		r.Header.Set("X_API", "x")
		if s, err := f(r); err != nil || s == "" {
			t.Errorf("%s: %q, %v", name, s, err)
		}
	}
	var ran atomic.Int32
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.KeyedHeaderScope("X-API-Key", secret)},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Add(1); w.WriteHeader(201) }))
	r := b.do("POST", "/", "k-1", "a", "X_API_KEY", "sk_live_1")
	if r.Status != 400 || problemType(t, r) != idemhttp.ProblemScopeHeaderSpelling || ran.Load() != 0 {
		t.Fatalf("X_API_KEY through the middleware: %d %s (handler ran %d times)", r.Status, r.Body, ran.Load())
	}
	if r := b.do("POST", "/", "k-1", "a", "X-API-Key", "sk_live_1"); r.Status != 201 || ran.Load() != 1 {
		t.Fatalf("X-API-Key through the middleware: %d %s", r.Status, r.Body)
	}
}

// HashScope of several values hashes all of them, joined by newlines: a scope made of an API
// key and an account is not the scope of the API key alone.
func TestHashScopeOfSeveralValues(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("sk_live_1\nacct_2"))
	if got := idemhttp.HashScope("sk_live_1", "acct_2"); got != hex.EncodeToString(sum[:]) || got == idemhttp.HashScope("sk_live_1") {
		t.Fatalf("HashScope(2 values) = %s, want the hex SHA-256 of both joined by a newline", got)
	}
	sum = sha256.Sum256(nil)
	if got := idemhttp.HashScope(); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("HashScope() = %s, want the hex SHA-256 of nothing", got)
	}
}

// ValidScope's ends: a scope of exactly MaxScopeLen bytes is valid, and a space, the first
// character after the control characters, is allowed (0x1f is not).
func TestValidScopeEnds(t *testing.T) {
	t.Parallel()
	if s := strings.Repeat("s", idemhttp.MaxScopeLen); !idemhttp.ValidScope(s) {
		t.Errorf("a scope of %d bytes is refused", len(s))
	}
	if !idemhttp.ValidScope("acme corp") || !idemhttp.ValidScope(" ") {
		t.Error("a scope with a space is refused")
	}
	if idemhttp.ValidScope("a\x1fb") || idemhttp.ValidScope("a\x7fb") {
		t.Error("a scope with 0x1f or DEL is accepted")
	}
}
