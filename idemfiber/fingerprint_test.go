package idemfiber

import (
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// The fingerprint is idem.Fingerprint(method, path, query, body), as idemhttp's RawFingerprint,
// for bodies laid out on the stack and beyond.
func TestFingerprintIsIdemhttps(t *testing.T) {
	app := fiber.New()
	for _, body := range []string{"", `{"amount":1000}`, strings.Repeat("b", 600)} {
		var rc fasthttp.RequestCtx
		rc.Request.Header.SetMethod("PATCH")
		rc.Request.SetRequestURI("/v1/charges?x=1&y=2")
		rc.Request.SetBodyString(body)
		c := app.AcquireCtx(&rc)
		got := fingerprint(c)
		key, fp := keyAndFingerprint(c, "tenant", "k-1")
		app.ReleaseCtx(c)
		want := idem.Fingerprint([]byte("PATCH"), []byte("/v1/charges"), []byte("x=1&y=2"), []byte(body))
		if got != want || fp != want {
			t.Fatalf("body of %d bytes: %s and %s, want %s", len(body), got, fp, want)
		}
		if wantKey := idemhttp.StorageKey("tenant", "k-1"); key != wantKey {
			t.Fatalf("storage key %q, want %q", key, wantKey)
		}
	}
}
