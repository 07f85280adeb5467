package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/store/memstore"
)

const stripeConfig = `
upstream: http://127.0.0.1:1
scope: none
error_body:
  content_type: application/json
  template: '{"error":{"type":"idempotency_error","code":{{json .Code}},"message":{{json .Title}},"status":{{.Status}}}}'
`

// TestErrorBody: with error_body set, the middleware's refusals (422), the gateway's own
// (400 for a method in the wrong case) and the proxy's (502 when the upstream cannot be
// reached) all come in the configured shape, with the gateway's status.
func TestErrorBody(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	defer up.Close()
	cfg, err := Parse([]byte(stripeConfig))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream = up.URL
	g, err := New(context.Background(), cfg, Options{Store: memstore.New(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	send := func(method, key, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/v1/charges", strings.NewReader(body))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w
	}
	check := func(name string, w *httptest.ResponseRecorder, status int, code string) {
		t.Helper()
		var env struct {
			Error struct {
				Type, Code, Message string
				Status              int
			}
		}
		if w.Code != status || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s, want %d application/json", name, w.Code, w.Header().Get("Content-Type"), status)
		}
		if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil || env.Error.Code != code ||
			env.Error.Status != status || env.Error.Type != "idempotency_error" || env.Error.Message == "" {
			t.Errorf("%s: body %s (%v), want code %s", name, w.Body, err, code)
		}
	}
	if w := send(http.MethodPost, "k1", `{"amount":1}`); w.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	check("mismatch", send(http.MethodPost, "k1", `{"amount":2}`), 422, "mismatch")
	check("method case", send("post", "k2", `{}`), 400, "method-case")

	up.Close() // nothing listens: the call never leaves
	check("upstream down", send(http.MethodPost, "k3", `{}`), 502, "upstream")
}

// TestErrorBodyRefusedAtLoad: a template that does not parse, fails, or makes invalid JSON
// for a JSON media type is a configuration error naming error_body.
func TestErrorBodyRefusedAtLoad(t *testing.T) {
	for name, eb := range map[string]ErrorBody{
		"empty":        {},
		"no parse":     {Template: `{"error":{{.Title}`},
		"unknown":      {Template: `{"error":{{json .Nope}}}`},
		"invalid JSON": {Template: `{"error":"{{.Title}}"}`}, // the title holds quotes: unquoted it breaks JSON
	} {
		c := Config{Upstream: "http://127.0.0.1:1", Scope: ScopeNone, ErrorBody: &eb}.WithDefaults()
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "error_body") {
			t.Errorf("%s: Validate() = %v, want an error naming error_body", name, err)
		}
	}
	// Not JSON, not checked as JSON.
	c := Config{Upstream: "http://127.0.0.1:1", Scope: ScopeNone,
		ErrorBody: &ErrorBody{ContentType: "text/plain", Template: "{{.Status}} {{.Code}}: {{.Title}}"}}.WithDefaults()
	if err := c.Validate(); err != nil {
		t.Errorf("text/plain template: %v", err)
	}
}
