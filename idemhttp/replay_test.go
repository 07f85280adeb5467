package idemhttp_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// TestNotRetainedReplayDropsEntityHeaders: the replay of a response that was too large to
// keep carries a problem body of its own, so none of the original's entity headers (its
// Content-Length, Content-Encoding, ETag, digests...) come with it: a client reading the
// replay gets exactly the problem body, not a partial transfer of a length that was the
// original's. The original's other headers (Location) are kept.
func TestNotRetainedReplayDropsEntityHeaders(t *testing.T) {
	t.Parallel()
	const size = 2 << 20
	big := strings.Repeat("x", size)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="export.bin"`)
		w.Header().Set("Content-Language", "en")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Last-Modified", "Sun, 06 Dec 2026 10:00:00 GMT")
		w.Header().Set("Digest", "sha-256=abc")
		w.Header().Set("Location", "/exports/1")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(big))
	})
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, h)
	r1 := b.do("POST", "/export", "nr-1", "x")
	if r1.Err != nil || r1.Status != 201 || len(r1.Body) != size {
		t.Fatalf("first: %d, %d bytes, %v", r1.Status, len(r1.Body), r1.Err)
	}
	r2 := b.do("POST", "/export", "nr-1", "x")
	if r2.Err != nil {
		t.Fatalf("reading the replay: %v (header %v)", r2.Err, r2.Header)
	}
	if r2.Status != 201 || problemType(t, r2) != idemhttp.ProblemNotRetained || r2.Header.Get("Location") != "/exports/1" {
		t.Fatalf("replay: %d %v %s", r2.Status, r2.Header, r2.Body)
	}
	if cl := r2.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(r2.Body)) {
		t.Fatalf("replay: Content-Length %s on a %d-byte problem body", cl, len(r2.Body))
	}
	for _, name := range []string{"Content-Disposition", "Content-Language", "Etag", "Last-Modified", "Digest"} {
		if v := r2.Header.Get(name); v != "" {
			t.Errorf("replay: the original's %s: %s came with the problem body", name, v)
		}
	}
}

// TestReplayOfStatusZeroRecord: a record kept by an effect that is not HTTP has status 0
// (idem.Response.Status). When the middleware meets one under a request's key, it replays it
// as 200, never passes 0 to WriteHeader (which panics), and does not run the handler.
func TestReplayOfStatusZeroRecord(t *testing.T) {
	t.Parallel()
	fp := idem.Fingerprint([]byte("same request"))
	var ran atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran.Add(1); w.WriteHeader(201) })
	b := setup(t, nil, idem.Options{}, idemhttp.Options{
		Fingerprint: func(*http.Request, []byte) (string, error) { return fp, nil },
		Scope:       idemhttp.SingleCaller(),
	}, h)
	_, err := b.eng.Do(context.Background(), idemhttp.StorageKey("", "zero-1"), fp, func(context.Context) (idem.Response, error) {
		return idem.Response{Status: 0, Body: []byte("kept")}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := b.do("POST", "/", "zero-1", "x")
	if r.Err != nil || r.Status != http.StatusOK || string(r.Body) != "kept" || r.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("replay of a status-0 record: %d %q %v %v", r.Status, r.Body, r.Header, r.Err)
	}
	if ran.Load() != 0 {
		t.Fatalf("the handler ran %d times for a completed key", ran.Load())
	}
}
