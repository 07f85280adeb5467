package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/examples/internal/runmain"
	"github.com/idemkit/idem/store/memstore"
)

func TestRouter(t *testing.T) {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var a api
	r, err := a.router(eng)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	defer srv.Close()
	post := func(path, body string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}

	alice := []string{"Authorization", "Bearer sk_alice", "Idempotency-Key", "a1"}
	r1, b1 := post("/v1/charges", `{"amount":1000}`, alice...)
	r2, b2 := post("/v1/charges", `{"amount":1000}`, alice...)
	if r1.StatusCode != http.StatusCreated || r1.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d replayed=%q %s", r1.StatusCode, r1.Header.Get("Idempotent-Replayed"), b1)
	}
	if r2.StatusCode != r1.StatusCode || string(b2) != string(b1) || r2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d replayed=%q %s, want a replay of %s", r2.StatusCode, r2.Header.Get("Idempotent-Replayed"), b2, b1)
	}
	if n := a.charges.Load(); n != 1 {
		t.Fatalf("charges = %d after a retry, want 1", n)
	}
	if r3, b3 := post("/v1/charges", `{"amount":9999}`, alice...); r3.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another body: %d %s, want 422", r3.StatusCode, b3)
	}
	// Another tenant's key of the same name is another request.
	if r4, _ := post("/v1/charges", `{"amount":1000}`, "Authorization", "Bearer sk_bob", "Idempotency-Key", "a1"); r4.StatusCode != http.StatusCreated || a.charges.Load() != 2 {
		t.Fatalf("another tenant: %d, charges %d", r4.StatusCode, a.charges.Load())
	}
	// The webhook route is protected on its own, keyed on the delivery id.
	d := []string{"X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"}
	post("/webhooks/github", `{}`, d...)
	if w, _ := post("/webhooks/github", `{}`, d...); w.Header.Get("Idempotent-Replayed") != "true" || a.deliveries.Load() != 1 {
		t.Fatalf("webhook retry: replayed=%q, deliveries %d", w.Header.Get("Idempotent-Replayed"), a.deliveries.Load())
	}
	if w, _ := post("/webhooks/github", `{}`); w.StatusCode != http.StatusBadRequest {
		t.Fatalf("webhook without a delivery id: %d, want 400", w.StatusCode)
	}
}

// The demo as `go run ./examples/chi` runs it: the retry replays, another tenant's key of the
// same name charges, the webhook retry replays, and one without a delivery id is refused.
func TestDemo(t *testing.T) {
	out := runmain.Run(t, time.Minute, main)
	want := []string{
		`POST /v1/charges       201 Created replayed="" {"charge":"ch_1","request":{"amount":1000}}`,
		`POST /v1/charges       201 Created replayed="true" {"charge":"ch_1","request":{"amount":1000}}`,
		`POST /v1/charges       201 Created replayed="" {"charge":"ch_2","request":{"amount":1000}}`,
		`GET  /v1/charges       200 OK replayed="" {"count":2}`,
		`POST /webhooks/github  204 No Content replayed="" `,
		`POST /webhooks/github  204 No Content replayed="true" `,
		`POST /webhooks/github  400 Bad Request replayed="" {`,
		`charges: 2 deliveries handled: 1`,
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) || !strings.HasSuffix(w, "{") && lines[i] != w {
			t.Errorf("line %d: %s\nwant %s", i+1, lines[i], w)
		}
	}
}
