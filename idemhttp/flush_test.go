package idemhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// A flush before the response is stored sends nothing: the client gets the answer only once
// it is recorded, so a crash between can never leave a client with an answer a retry replaces.
func TestFlushWaitsForTheRecord(t *testing.T) {
	t.Parallel()
	eng, _ := idem.New(memstore.New(), idem.Options{})
	mw, _ := idemhttp.New(idemhttp.Options{Runner: eng, Scope: idemhttp.SingleCaller()})
	flushed, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		io.WriteString(w, "charged")
		w.(http.Flusher).Flush()
		close(flushed)
		<-release
	})))
	defer srv.Close()
	got := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	<-flushed
	select {
	case b := <-got:
		t.Fatalf("the client got %q before the handler returned and the record was stored", b)
	case <-time.After(150 * time.Millisecond):
	}
	close(release)
	if b := <-got; b != "charged" {
		t.Fatalf("body %q", b)
	}
}
