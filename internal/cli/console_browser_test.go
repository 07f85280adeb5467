package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/syncbuf"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/internal/testenv"
)

// chromium returns the path of a headless-capable chromium: IDEM_CHROMIUM, or Debian's. It
// skips the test without one (fails it with IDEM_REQUIRE_SERVICES=1).
func chromium(t *testing.T) string {
	t.Helper()
	path := cmp.Or(os.Getenv("IDEM_CHROMIUM"), "/usr/bin/chromium")
	if _, err := os.Stat(path); err != nil {
		testenv.Missing(t, "no chromium at %s (%v): run scripts/chromium.sh, or set IDEM_CHROMIUM", path, err)
	}
	return path
}

// screenshotDir is where the browser test writes its screenshots: IDEM_SCREENSHOT_DIR, or the
// test's temporary directory.
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("IDEM_SCREENSHOT_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestConsoleBrowser drives the console of `idem serve --console-listen` with a real headless
// chromium: requests sent through the running gateway are listed; a search by client key and
// by tenant (found from its identity) finds the one record; a key whose upstream call ended
// without an answer is shown as stuck (held), its release is refused without force and done
// with it after a confirmation, and its retry then executes; the rates chart is drawn; a
// browser without the token gets 401; and no stored credential reaches a page.
func TestConsoleBrowser(t *testing.T) {
	exec := chromium(t)
	const (
		token  = "browser-test-token-0123456789"
		secret = "browser-test-scope-secret"
	)
	var hang atomic.Bool
	hang.Store(true)
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := calls.Add(1)
		if r.URL.Path == "/hang" && hang.Load() {
			// The request arrived and no answer comes back: the outcome is uncertain.
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		w.Header().Set("X-Session-Token", "UPSTREAM-SECRET-TOKEN")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":"ch_%d","request":%q}`, n, body)
	}))
	defer up.Close()

	vars := map[string]string{"IDEM_CONSOLE_TOKEN": token, "IDEM_SCOPE_SECRET": secret}
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return vars[k] }}
	fs := newFlags(e, "serve", "")
	f := bindServe(e, fs)
	if err := parse(fs, []string{"--listen", "127.0.0.1:0", "--upstream", up.URL, "--store", "memory://",
		"--scope-header", "X-Api-Key", "--uncertain", "hold", "--console-listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := f.resolve(e, fs)
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.WithDefaults()
	gwAddr, conAddr := make(chan string, 1), make(chan string, 1)
	f.console.ready = func(a string) { conAddr <- a }
	f.console.rateStep = 250 * time.Millisecond
	con, err := f.console.sidecar(e)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	logs := &syncbuf.Buffer{}
	go func() {
		served <- serve(ctx, nil, cfg, newLogger(logs, "text", "info"), func(a serveAddrs) { gwAddr <- a.addr }, con)
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	var gw, base string
	select {
	case a := <-gwAddr:
		gw, base = "http://"+a, "http://"+<-conAddr
	case err := <-served:
		t.Fatalf("serve: %v", err)
	}

	send := func(tenant, key, path, body string) int {
		t.Helper()
		req, _ := http.NewRequest("POST", gw+path, strings.NewReader(body))
		req.Header.Set("X-Api-Key", tenant)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Spread over a few seconds, so the rates chart has a shape.
	for i := 1; i <= 6; i++ {
		send("alice-api-key", fmt.Sprintf("order-%d", i), "/charges", fmt.Sprintf(`{"amount":%d}`, i*100))
		send("alice-api-key", fmt.Sprintf("order-%d", i), "/charges", fmt.Sprintf(`{"amount":%d}`, i*100))
		if i <= 3 {
			send("bob-api-key", fmt.Sprintf("order-%d", i), "/charges", `{"amount":5}`)
		}
		time.Sleep(400 * time.Millisecond)
	}
	if got := send("alice-api-key", "order-2", "/charges", `{"amount":200}`); got != http.StatusCreated {
		t.Fatalf("replay: %d", got)
	}
	if got := send("alice-api-key", "order-2", "/charges", `{"amount":999}`); got != http.StatusUnprocessableEntity {
		t.Fatalf("mismatch: %d", got)
	}
	if got := send("bob-api-key", "refund-7", "/hang", `{"refund":7}`); got < 500 {
		t.Fatalf("a request without an answer: %d", got)
	}
	if got := send("bob-api-key", "refund-7", "/hang", `{"refund":7}`); got != http.StatusConflict {
		t.Fatalf("its retry while held: %d, want 409", got)
	}
	bob := idemhttp.KeyedHashScope([]byte(secret), "bob-api-key")
	alice := idemhttp.KeyedHashScope([]byte(secret), "alice-api-key")
	stuckKey := idemhttp.StorageKey(bob, "refund-7")

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exec), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 860))
	defer cancelAlloc()
	started := time.Now()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil { // starts the browser, without a timeout
		t.Fatalf("starting chromium: %v", err)
	}
	bctx, cancelTimeout := context.WithTimeout(bctx, 90*time.Second)
	defer cancelTimeout()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// load runs the steps, which navigate or submit a form, and waits for the new page.
	load := func(what string, steps ...chromedp.Action[chromedp.Void]) int64 {
		t.Helper()
		resp, err := chromedp.RunResponse(bctx, steps...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return resp.Status
	}
	eval := func(what, js string, v any) {
		t.Helper()
		res, err := chromedp.Run(bctx, chromedp.Evaluate[json.RawMessage](js, chromedp.EvalAwaitPromise))
		if err == nil {
			err = json.Unmarshal(res, v)
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	location := func() string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	listed := func() (keys, tenants []string) {
		t.Helper()
		eval("keys", `Array.from(document.querySelectorAll("a.key")).map(a => a.textContent)`, &keys)
		eval("tenants", `Array.from(document.querySelectorAll("td .tenant")).map(a => a.textContent)`, &tenants)
		return keys, tenants
	}
	shots := screenshotDir(t)
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", filepath.Join(shots, name))
	}

	// 1. A browser without the token is refused: the 401 and its Basic challenge make headless
	// chromium give up the page (it has no prompt to show).
	t.Logf("browser started after %v", time.Since(started).Round(time.Millisecond))
	if resp, err := chromedp.RunResponse(bctx, chromedp.Navigate(base+"/")); err == nil && resp.Status != http.StatusUnauthorized ||
		err != nil && !strings.Contains(err.Error(), "ERR_INVALID_AUTH_CREDENTIALS") {
		t.Fatalf("without the token: %v %v, want a 401", err, resp)
	}

	// 2. With it, the list shows the requests sent through the gateway, and the rates chart.
	do("token", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + token}})
		return err
	}))
	if status := load("list", chromedp.Navigate(base+"/")); status != http.StatusOK {
		t.Fatalf("list: %d", status)
	}
	do("chart", chromedp.WaitVisible(chromedp.CSS("#rates svg polyline")))
	if keys, _ := listed(); len(keys) != 10 {
		t.Fatalf("list shows %d records, want 10: %v", len(keys), keys)
	}
	var rates struct {
		Series map[string][]float64 `json:"series"`
	}
	eval("rates", `fetch("/api/rates").then(r => r.json())`, &rates)
	for _, g := range []string{"new", "replay", "409", "422"} {
		if sum(rates.Series[g]) == 0 {
			t.Errorf("the %s rate never rose: %v", g, rates.Series[g])
		}
	}
	shot("console-list.png")

	// 3. A search by client key, then by tenant found from its identity, finds one record.
	load("search by key", chromedp.SetValue(chromedp.CSS(`input[name="key"]`), "order-2"), chromedp.Click(chromedp.CSS("#search")))
	if loc := location(); !strings.Contains(loc, "key=order-2") {
		t.Fatalf("after the search: %s", loc)
	}
	load("find tenant", chromedp.SendKeys(chromedp.CSS("#identity"), "alice-api-key"), chromedp.Click(chromedp.CSS("#find-tenant")))
	keys, tenants := listed()
	if loc := location(); len(keys) != 1 || keys[0] != "order-2" || tenants[0] != alice[:8] || !strings.Contains(loc, "tenant="+alice) || strings.Contains(loc, "alice-api-key") {
		t.Fatalf("search for alice's order-2: %v %v at %s", keys, tenants, loc)
	}

	// 4. The record page shows the stored response, without the upstream's token.
	load("record", chromedp.Click(chromedp.CSS("a.key")))
	if page := text("main"); !strings.Contains(page, `\"amount\":200`) || !strings.Contains(page, "X-Session-Token") || !strings.Contains(page, "(hidden: 21 bytes)") || strings.Contains(page, "UPSTREAM-SECRET") {
		t.Fatalf("record page:\n%s", page)
	}
	shot("console-record.png")

	// 5. The stuck key: listed as held and stuck; released only with force, after confirming.
	load("stuck", chromedp.Navigate(base+"/?state=stuck"))
	if rows := text("table.records tbody"); !strings.Contains(rows, "refund-7") || !strings.Contains(rows, "held") || !strings.Contains(rows, "stuck") || strings.Contains(rows, "order-") {
		t.Fatalf("stuck records:\n%s", rows)
	}
	load("stuck record", chromedp.Click(chromedp.CSS("a.key")))
	load("confirmation", chromedp.Click(chromedp.CSS("#release")))
	if page := text("main"); !strings.Contains(page, "lease is live") {
		t.Fatalf("the confirmation does not warn of the live lease:\n%s", page)
	}
	if status := load("release without force", chromedp.Click(chromedp.CSS("#confirm"))); status != http.StatusConflict || !strings.Contains(text("#result"), "without force") {
		t.Fatalf("a release without force: %d %q", status, text("#result"))
	}
	load("after the refusal", chromedp.Navigate(base+"/record?key="+url.QueryEscape(stuckKey)))
	if c := text("#condition"); c != string(console.Held) {
		t.Fatalf("after a refused release: %q", c)
	}
	load("confirmation again", chromedp.Click(chromedp.CSS("#release")))
	if status := load("release with force", chromedp.Click(chromedp.CSS("#force")), chromedp.Click(chromedp.CSS("#confirm"))); status != http.StatusOK || !strings.Contains(text("#result"), "released the held claim") {
		t.Fatalf("a forced release: %d %q", status, text("#result"))
	}
	if l := logs.String(); !strings.Contains(l, "console: release") || !strings.Contains(l, "who=token") || !strings.Contains(l, "refund-7") {
		t.Fatalf("the release is not logged with who and which key:\n%s", l)
	}
	hang.Store(false)
	before := calls.Load()
	if got := send("bob-api-key", "refund-7", "/hang", `{"refund":7}`); got != http.StatusCreated || calls.Load() != before+1 {
		t.Fatalf("the retry after the release: %d, upstream calls %d → %d", got, before, calls.Load())
	}

	// 6. A phone's width: the list still reads.
	do("phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	load("phone list", chromedp.Navigate(base+"/?key=order"))
	shot("console-phone.png")
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}
