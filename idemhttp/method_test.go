package idemhttp_test

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// The method is part of the fingerprint: the same key and body sent with POST then PUT (or
// PATCH) is a reuse of the key for another request, 422, never a replay of the POST's answer
// — whatever the fingerprint mode.
func TestMethodIsFingerprinted(t *testing.T) {
	t.Parallel()
	for name, fp := range map[string]func(*http.Request, []byte) (string, error){
		"raw":  idemhttp.RawFingerprint,
		"json": idemhttp.JSONFingerprint(),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int32
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, r.Method)
			})
			b := setup(t, nil, idem.Options{}, idemhttp.Options{Methods: []string{"POST", "PUT", "PATCH"}, Fingerprint: fp, Scope: idemhttp.SingleCaller()}, h)
			const body = `{"amount":1}`
			if r := b.do("POST", "/orders", "m-1", body); r.Status != 201 || string(r.Body) != "POST" {
				t.Fatalf("POST: %d %q %v", r.Status, r.Body, r.Err)
			}
			for _, method := range []string{"PUT", "PATCH"} {
				r := b.do(method, "/orders", "m-1", body)
				if r.Status != 422 || problemType(t, r) != idemhttp.ProblemMismatch {
					t.Fatalf("%s with the POST's key and body: %d %q, want 422 mismatch", method, r.Status, r.Body)
				}
			}
			if r := b.do("POST", "/orders", "m-1", body); r.Status != 201 || string(r.Body) != "POST" || r.Header.Get(idemhttp.ReplayedHeader) != "true" {
				t.Fatalf("POST again: %d %q, want the replay", r.Status, r.Body)
			}
			if n.Load() != 1 {
				t.Fatalf("handler ran %d times, want 1", n.Load())
			}
		})
	}
}
