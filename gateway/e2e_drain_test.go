package gateway_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/gateway"
)

// TestBinaryReadyzDrains: from the first SIGTERM, /readyz answers 503 on the metrics listener
// (so a load balancer stops sending requests) while a request in flight is still being
// answered; that request still completes with the upstream's answer, and the gateway exits 0.
func TestBinaryReadyzDrains(t *testing.T) {
	t.Parallel()
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(arrived) })
		<-release
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ch_drain"}`)
	}))
	t.Cleanup(up.Close)
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	maddr := ln.Addr().String()
	ln.Close()
	g := startGateway(t, "--upstream", up.URL, "--store", "memory://", "--metrics-listen", maddr, "--shutdown-timeout", "30s")
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + maddr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) { // the metrics listener opens after the gateway's
		code, body := readyz()
		if code == http.StatusOK {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("/readyz before shutdown: %d %s", code, body)
		}
	}
	res := make(chan answer, 1)
	go func() { res <- post(t, g.url, "drain-ready", charge) }()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the upstream")
	}
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := readyz()
		if code == http.StatusServiceUnavailable && strings.Contains(body, "draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz 5s after SIGTERM, while a request is in flight: %d %q, want 503 draining", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case a := <-res:
		t.Fatalf("the request finished before its upstream answered: %d %s", a.status, a.body)
	case err := <-g.done:
		t.Fatalf("the gateway exited with a request in flight: %v", err)
	default:
	}
	// Still draining a moment later: not a transient answer.
	time.Sleep(100 * time.Millisecond)
	if code, _ := readyz(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while draining: %d, want 503", code)
	}
	released.Do(func() { close(release) })
	a := <-res
	if a.status != http.StatusCreated || a.body != `{"id":"ch_drain"}` {
		t.Fatalf("the in-flight request during the drain: %d %q", a.status, a.body)
	}
	select {
	case err := <-g.done:
		if err != nil {
			t.Fatalf("exit after the drain: %v\n%s", err, g.log())
		}
		g.done <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway did not exit after the drain")
	}
}

// TestReadyDrain: Drain turns Ready into ErrDraining and /readyz into 503 on both handlers,
// while requests are still served.
func TestReadyDrain(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	t.Cleanup(up.Close)
	g, err := gateway.New(context.Background(), gateway.Config{Upstream: up.URL, Store: "memory://", Scope: "none"}, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	get := func(h http.Handler, method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, nil)
		r.Header.Set("Idempotency-Key", "k-"+path)
		h.ServeHTTP(w, r)
		return w
	}
	if err := g.Ready(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.Drain()
	if err := g.Ready(context.Background()); !errors.Is(err, gateway.ErrDraining) {
		t.Fatalf("Ready after Drain: %v, want ErrDraining", err)
	}
	for name, h := range map[string]http.Handler{"gateway": g, "admin": g.AdminHandler()} {
		if w := get(h, "GET", "/readyz"); w.Code != http.StatusServiceUnavailable || w.Body.String() != "draining\n" {
			t.Errorf("%s /readyz after Drain: %d %q", name, w.Code, w.Body)
		}
		if w := get(h, "GET", "/healthz"); w.Code != http.StatusOK {
			t.Errorf("%s /healthz after Drain: %d", name, w.Code)
		}
	}
	if w := get(g, "POST", "/v1/charges"); w.Code != http.StatusCreated {
		t.Errorf("a request while draining: %d, want it served", w.Code)
	}
}
