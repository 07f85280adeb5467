package console_test

import (
	"cmp"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/storeurl"
)

// TestBrowserRecordShowsRequest opens, in a real headless chromium, the page of a running
// record that retained its request, on memory and SQLite stores: the request line, its headers
// and the body's first bytes are shown as text; markup in them never runs (no script element,
// no image) and a hidden header's value is not on the page.
func TestBrowserRecordShowsRequest(t *testing.T) {
	exec := cmp.Or(os.Getenv("IDEM_CHROMIUM"), "/usr/bin/chromium")
	if _, err := os.Stat(exec); err != nil {
		testenv.Missing(t, "no chromium at %s (%v): run scripts/chromium.sh, or set IDEM_CHROMIUM", exec, err)
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exec), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 860))
	defer cancelAlloc()
	for name, raw := range map[string]string{"memory": "memory://", "sqlite": "sqlite://" + filepath.Join(t.TempDir(), "r.db")} {
		t.Run(name, func(t *testing.T) {
			st, err := storeurl.Open(context.Background(), raw)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			browseRequest(t, allocCtx, st)
		})
	}
}

func browseRequest(t *testing.T, allocCtx context.Context, st storeurl.Store) {
	c, err := console.New(console.Options{Store: st, Token: token, HiddenHeaders: []string{"X-Tenant"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(func() { srv.Close(); c.Close() })
	sent := &idem.Request{Method: "POST", Target: "/v1/orders?q=<b>bold</b>", BodySize: 9000, Truncated: true,
		Header: map[string][]string{"Content-Type": {"application/json"}, "X-Note": {`<img src=x onerror="window.pwned=1">`},
			"X-Tenant": {"SECRET-TENANT"}, "Authorization": {"[redacted]"}},
		Body: []byte(`{"amount":100}</pre><script>window.pwned=2</script>`)}
	if _, err := st.Reserve(context.Background(), idem.ReserveRequest{Key: "t|order-9", Fingerprint: fp, Request: sent,
		Now: time.Now(), Lease: time.Hour, TTL: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 60*time.Second)
	defer cancelTimeout()
	if err := chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + token}})
		return err
	})); err != nil {
		t.Fatal(err)
	}
	resp, err := chromedp.RunResponse(bctx, chromedp.Navigate(srv.URL+"/record?key=t%7Corder-9"))
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("record page: %v %v", resp, err)
	}
	text := func(js string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", js, err)
		}
		return v
	}
	if got := text(`document.getElementById("request-line").textContent`); got != "POST /v1/orders?q=<b>bold</b>" {
		t.Errorf("request line %q", got)
	}
	if got := text(`document.getElementById("request-body").textContent`); got != string(sent.Body) {
		t.Errorf("request body %q", got)
	}
	headers := text(`document.getElementById("request-headers").textContent`)
	for _, want := range []string{"application/json", `<img src=x onerror="window.pwned=1">`, "(hidden: 13 bytes)"} {
		if !strings.Contains(headers, want) {
			t.Errorf("request headers lack %q: %q", want, headers)
		}
	}
	if strings.Contains(text(`document.body.textContent`), "SECRET-TENANT") {
		t.Error("the page shows a hidden header's value")
	}
	if got := text(`String(window.pwned) + " " + document.querySelectorAll("main script, main img, main b").length`); got != "undefined 0" {
		t.Errorf("markup from the request ran or was parsed: %q", got)
	}
}
