package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/gateway"
)

// TestInspectCountsEveryAttempt: the upstream fails twice (500, 502; each failure releases the
// key) and succeeds on the client's third try. inspect and list --json report the three
// executions and the first attempt's time, not one attempt as old as the last.
func TestInspectCountsEveryAttempt(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef0123456789abcdef"
	statuses := []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusCreated}
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(calls.Add(1)) - 1
		w.WriteHeader(statuses[min(n, len(statuses)-1)])
		_, _ = io.WriteString(w, `{"try":`+string(rune('1'+n))+`}`)
	}))
	t.Cleanup(up.Close)
	store := "sqlite://" + filepath.Join(t.TempDir(), "idem.db")
	url := startServe(t, gateway.Config{Upstream: up.URL, Store: store, ScopeHeader: "X-API-Key", ScopeSecret: secret}, nil)
	before := time.Now()
	var second time.Time // when the second try was sent: the first claim came before it
	for i, want := range statuses {
		if i == 1 {
			second = time.Now()
		}
		if code, body := send(t, url, "tenant-a", "pay-1"); code != want {
			t.Fatalf("try %d: %d %s, want %d", i+1, code, body, want)
		}
		time.Sleep(20 * time.Millisecond) // the first attempt is measurably older than the last
	}
	if code, _ := send(t, url, "tenant-a", "pay-1"); code != http.StatusCreated || calls.Load() != 3 {
		t.Fatalf("replay: %d after %d upstream calls, want 201 after 3", code, calls.Load())
	}
	vars := map[string]string{"IDEM_STORE": store, "IDEM_SCOPE_SECRET": secret}
	code, out, errs := runEnv(t, vars, "inspect", "pay-1", "--scope-value", "tenant-a", "--json")
	var in inspection
	if err := json.Unmarshal([]byte(out), &in); code != 0 || err != nil {
		t.Fatalf("inspect --json: %d %v\n%s%s", code, err, out, errs)
	}
	first, err := time.Parse(time.RFC3339Nano, in.FirstClaimed)
	if err != nil {
		t.Fatalf("first_claimed %q: %v", in.FirstClaimed, err)
	}
	if in.Attempts != 3 || in.Status != 201 || first.Before(before.Truncate(time.Microsecond)) || !first.Before(second) {
		t.Errorf("inspect --json: attempts %d, status %d, first claimed %v (the first try was sent at %v, the second at %v)", in.Attempts, in.Status, first, before, second)
	}
	code, out, errs = runEnv(t, vars, "inspect", "pay-1", "--scope-value", "tenant-a")
	if code != 0 || !strings.Contains(out, "attempts     3\n") || !strings.Contains(out, "first claim  "+in.FirstClaimed+"\n") {
		t.Errorf("inspect: %d\n%s%s", code, out, errs)
	}
	code, out, errs = runEnv(t, vars, "list", "--json")
	if code != 0 || !strings.Contains(out, `"attempts":3`) && !strings.Contains(out, `"attempts": 3`) {
		t.Errorf("list --json: %d\n%s%s", code, out, errs)
	}
}
