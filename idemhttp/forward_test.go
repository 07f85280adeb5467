package idemhttp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// countingConn counts the writes made on a connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A handler that forwards the request body it was given (a reverse proxy) sends the forwarded
// request in one write, headers and body together: net/http's client knows the body the
// middleware hands over to be in memory.
func TestForwardedBodyGoesOutInOneWrite(t *testing.T) {
	for _, detach := range []bool{false, true} {
		t.Run(fmt.Sprintf("DetachBody=%v", detach), func(t *testing.T) { forwardInOneWrite(t, detach) })
	}
}

func forwardInOneWrite(t *testing.T, detach bool) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
	}))
	defer upstream.Close()
	var writes atomic.Int64
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return countingConn{c, &writes}, err
	}}
	defer tr.CloseIdleConnections()
	forward := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out, err := http.NewRequestWithContext(r.Context(), r.Method, upstream.URL, r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		out.ContentLength = r.ContentLength
		n0 := writes.Load()
		resp, err := tr.RoundTrip(out)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		if n := writes.Load() - n0; n != 1 {
			t.Errorf("the forwarded request took %d writes, want 1", n)
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.New(idemhttp.Options{Runner: eng, DetachBody: detach, Scope: idemhttp.SingleCaller()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(forward))
	defer srv.Close()
	// Bodies that fit the client's 4 KiB write buffer beside the headers.
	for _, body := range []string{`{"amount":4200}`, strings.Repeat("x", 2_000)} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", "fwd-"+body[:5])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || string(got) != body {
			t.Errorf("status %d, body %.40q, want 201 and the request body", resp.StatusCode, got)
		}
	}
}

// With DetachBody, the body a handler was given still reads as its own request's once the
// handler has returned and the middleware has served other requests, as an http.Transport may
// read it (it may go on writing a request after RoundTrip returned). The other requests run
// one after another on one connection, so that the middleware's pool gives them the buffers the
// first request left behind.
func TestDetachedBodyOutlivesTheHandler(t *testing.T) {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.New(idemhttp.Options{Runner: eng, DetachBody: true, Scope: idemhttp.SingleCaller()})
	if err != nil {
		t.Fatal(err)
	}
	kept := make(chan io.Reader, 1)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case kept <- r.Body: // the first request's body, read later
		default:
			_, _ = io.Copy(io.Discard, r.Body)
		}
		w.WriteHeader(http.StatusCreated)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	first := `{"tenant":"A","card":"4242"}`
	for i, body := range []string{first, `{"tenant":"B","card":"1111"}`, `{"tenant":"C","card":"0000"}`} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", fmt.Sprint("detach-", i))
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	got, _ := io.ReadAll(<-kept)
	if string(got) != first {
		t.Errorf("the first request's body read after later requests: %q, want %q", got, first)
	}
}
