package idemhttp_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// A handler may use every status net/http accepts, 100 to 999: an informational 100 goes to
// the client and the final status is stored and replayed; 999 reaches the client (the policy
// then decides, like any status at or above 500, that it is not kept).
func TestStatusRangeEnds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, idem.Options{}, idemhttp.Options{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/continue" {
			w.WriteHeader(http.StatusContinue)
			w.WriteHeader(http.StatusCreated)
		} else {
			w.WriteHeader(999)
		}
		_, _ = io.WriteString(w, "done")
	}))
	first := b.do(http.MethodPost, "/continue", "k1", `{}`)
	again := b.do(http.MethodPost, "/continue", "k1", `{}`)
	if first.Status != http.StatusCreated || string(first.Body) != "done" || again.Status != http.StatusCreated ||
		string(again.Body) != "done" || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after a 100: first %d %q, replay %d %q %v; want 201 done, replayed", first.Status, first.Body, again.Status, again.Body, again.Header)
	}
	if r := b.do(http.MethodPost, "/max", "k2", `{}`); r.Status != 999 || string(r.Body) != "done" {
		t.Fatalf("status 999: got %d %q", r.Status, r.Body)
	}
}
