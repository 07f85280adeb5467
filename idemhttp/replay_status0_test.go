package idemhttp_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

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
