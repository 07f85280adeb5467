package gateway_test

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// TestBinaryRetainRequest: `idem serve --retain-request` in front of an upstream that holds its
// answer. While the claim is in flight (what an operator investigates), `idem inspect` shows
// the method, path and query, the kept headers and the body's first bytes; no credential —
// Authorization, Cookie, the scope header's value, a token in the query — reaches the store or
// the output. The stored request is within --retain-request-max. Without the flag no request is
// kept. (Planted: the credential filter removed → the secrets appear and this fails; the bound
// removed → the stored request is over --retain-request-max and this fails.)
func TestBinaryRetainRequest(t *testing.T) {
	t.Parallel()
	const bound = 1024
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	arrived := make(chan struct{}, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"ord_1"}`)
	}))
	t.Cleanup(up.Close)
	dbFile := filepath.Join(t.TempDir(), "idem.db")
	store := "sqlite://" + dbFile
	g := startGateway(t, "--upstream", up.URL, "--store", store, "--scope-header", "X-API-Key",
		"--retain-request", "--retain-request-max", "1KiB")

	secrets := []string{"tok-SECRET-1", "ck-SECRET-2", "tenant-SECRET-3", "qs-SECRET-4"}
	body := `{"amount":100,"currency":"eur","note":"` + strings.Repeat("n", 3000) + `"}`
	req, _ := http.NewRequest("POST", g.url+"/v1/orders?currency=eur&access_token="+secrets[3], strings.NewReader(body))
	req.Header.Set("Idempotency-Key", "order-42")
	req.Header.Set("Authorization", "Bearer "+secrets[0])
	req.Header.Set("Cookie", "sid="+secrets[1])
	req.Header.Set("X-API-Key", secrets[2])
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "req-7")
	done := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream was never called")
	}

	inspect := func(extra ...string) string {
		t.Helper()
		cmd := exec.Command(idemBinary(t), append([]string{"inspect", "order-42", "--store", store, "--scope-value", secrets[2]}, extra...)...)
		cmd.Env = append(os.Environ(), "IDEM_SCOPE_SECRET="+testSecret)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("idem inspect %v: %v\n%s", extra, err, out)
		}
		return string(out)
	}
	text := inspect()
	for _, want := range []string{
		"request      POST /v1/orders?currency=eur&access_token=[redacted]\n",
		"  Content-Type: application/json\n", "  X-Request-Id: req-7\n",
		"  Authorization: [redacted]\n", "  Cookie: [redacted]\n", "  X-Api-Key: [redacted]\n",
		fmt.Sprintf(`of %d bytes): {"amount":100,"currency":"eur","note":"nnn`, len(body)),
		"(cut to the retained request's bound)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("idem inspect lacks %q:\n%s", want, text)
		}
	}
	var in struct {
		Condition string `json:"condition"`
		Request   *struct {
			Method    string              `json:"method"`
			Target    string              `json:"target"`
			Headers   map[string][]string `json:"headers"`
			BodyBytes int64               `json:"body_bytes"`
			BodyKept  int                 `json:"body_kept"`
			Body      string              `json:"body"`
			Truncated bool                `json:"truncated"`
		} `json:"request"`
	}
	js := inspect("--json")
	if err := json.Unmarshal([]byte(js), &in); err != nil || in.Request == nil {
		t.Fatalf("inspect --json: %v\n%s", err, js)
	}
	if r := in.Request; in.Condition != "running" || r.Method != "POST" || r.BodyBytes != int64(len(body)) || !r.Truncated ||
		r.BodyKept == 0 || !strings.HasPrefix(body, r.Body) || r.Headers["X-Request-Id"][0] != "req-7" {
		t.Errorf("inspect --json: condition %s, request %+v", in.Condition, r)
	}
	for _, s := range secrets {
		if strings.Contains(text, s) || strings.Contains(js, s) {
			t.Errorf("idem inspect shows the credential %q", s)
		}
	}

	// What the store holds: within the bound, and no credential in any column.
	db, err := sql.Open("sqlite", dbFile)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stored []byte
	if err := db.QueryRow(`SELECT request FROM idem_records`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if len(stored) == 0 || len(stored) > bound {
		t.Errorf("the store holds a request of %d bytes, bound %d", len(stored), bound)
	}
	for _, s := range secrets {
		if strings.Contains(string(stored), s) {
			t.Errorf("the store holds the credential %q", s)
		}
	}
	once.Do(func() { close(release) })
	if code := <-done; code != http.StatusCreated {
		t.Fatalf("the client got %d, want 201", code)
	}
	if after := inspect(); !strings.Contains(after, "request      POST /v1/orders") {
		t.Errorf("after completion, inspect lost the request:\n%s", after)
	}

	// Without --retain-request: nothing kept.
	plainStore := "sqlite://" + filepath.Join(t.TempDir(), "plain.db")
	plain := startGateway(t, "--upstream", up.URL, "--store", plainStore, "--scope", "none")
	req2, _ := http.NewRequest("POST", plain.url+"/v1/orders", strings.NewReader(`{"amount":1}`))
	req2.Header.Set("Idempotency-Key", "order-43")
	resp, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	out, err := exec.Command(idemBinary(t), "inspect", "order-43", "--store", plainStore, "--scope", "none", "--json").CombinedOutput()
	if err != nil || strings.Contains(string(out), `"request"`) || !strings.Contains(string(out), `"status": 201`) {
		t.Errorf("inspect of a record kept without --retain-request: %v\n%s", err, out)
	}
}
