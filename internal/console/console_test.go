package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/syncbuf"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/store/memstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "s3cret-console-token"

type bundle struct {
	st   *memstore.Store
	srv  *httptest.Server
	logs *syncbuf.Buffer
	now  time.Time
}

func setup(t *testing.T, mod func(*console.Options)) *bundle {
	t.Helper()
	b := &bundle{st: memstore.New(), logs: &syncbuf.Buffer{}, now: time.Now()}
	opt := console.Options{Store: b.st, Token: token, Logger: slog.New(slog.NewTextHandler(b.logs, nil)), StoreName: "memory://"}
	if mod != nil {
		mod(&opt)
	}
	c, err := console.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	b.srv = httptest.NewServer(c)
	t.Cleanup(func() {
		b.srv.Close()
		c.Close()
	})
	return b
}

var fp = idem.Fingerprint([]byte("body"))

// running claims key with a live lease; held extends it to the record's expiry (an uncertain
// outcome held); stale claims it in the past with a lease run out; completed stores resp.
func (b *bundle) running(t *testing.T, key string) int64 {
	t.Helper()
	res, err := b.st.Reserve(context.Background(), idem.ReserveRequest{Key: key, Fingerprint: fp, Now: b.now, Lease: time.Hour, TTL: 2 * time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("reserve %q: %v %+v", key, err, res)
	}
	return res.Record.Token
}

func (b *bundle) held(t *testing.T, key string) {
	t.Helper()
	res, _ := b.st.Reserve(context.Background(), idem.ReserveRequest{Key: key, Fingerprint: fp, Now: b.now, Lease: time.Minute, TTL: time.Hour})
	if err := b.st.Extend(context.Background(), key, res.Record.Token, b.now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) stale(t *testing.T, key string) {
	t.Helper()
	if _, err := b.st.Reserve(context.Background(), idem.ReserveRequest{Key: key, Fingerprint: fp, Now: b.now.Add(-2 * time.Minute), Lease: time.Minute, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) completed(t *testing.T, key string, resp idem.Response) {
	t.Helper()
	res, _ := b.st.Reserve(context.Background(), idem.ReserveRequest{Key: key, Fingerprint: fp, Now: b.now, Lease: time.Minute, TTL: time.Hour})
	if err := b.st.Complete(context.Background(), key, res.Record.Token, resp, b.now, b.now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// client is a browser's session: the token on every request, its cookies kept.
type client struct {
	t   *testing.T
	srv *httptest.Server
	jar map[string]*http.Cookie
}

func (b *bundle) client(t *testing.T) *client {
	return &client{t: t, srv: b.srv, jar: map[string]*http.Cookie{}}
}

func (c *client) do(req *http.Request) (int, string, http.Header) {
	c.t.Helper()
	if req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, ck := range c.jar {
		req.AddCookie(ck)
	}
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	for _, ck := range resp.Cookies() {
		c.jar[ck.Name] = ck
	}
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func (c *client) get(path string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest("GET", c.srv.URL+path, nil)
	code, body, _ := c.do(req)
	return code, body
}

// post sends a form as the console's own page does (same origin).
func (c *client) post(path string, form url.Values, hdr map[string]string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Origin", c.srv.URL)
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	code, body, _ := c.do(req)
	return code, body
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
var tokenRe = regexp.MustCompile(`name="token" value="([0-9]+)"`)

// releaseForm opens the confirmation page of key and returns the form it would post.
func (c *client) releaseForm(key string) url.Values {
	c.t.Helper()
	code, page := c.get("/release?key=" + url.QueryEscape(key))
	m, tm := csrfRe.FindStringSubmatch(page), tokenRe.FindStringSubmatch(page)
	if code != 200 || m == nil || tm == nil {
		c.t.Fatalf("confirmation page of %q: %d, no form\n%s", key, code, page)
	}
	return url.Values{"csrf": {m[1]}, "key": {key}, "token": {tm[1]}, "confirm": {"yes"}}
}

func TestNewNeedsACredential(t *testing.T) {
	t.Parallel()
	for _, opt := range []console.Options{
		{Store: memstore.New()},
		{Store: memstore.New(), User: "ops"},
		{Token: token},
	} {
		if _, err := console.New(opt); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("New(%+v) = %v, want ErrInvalidInput", opt, err)
		}
	}
}

// TestAuth: every path, the static assets included, needs the credential: 401 with a Basic
// challenge without it or with a wrong one; a bearer token, the token as a basic password, or
// the configured user and password get in.
func TestAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *console.Options) { o.User, o.Password = "ops", "pa55word-long-enough" })
	for _, path := range []string{"/", "/record?key=x", "/release?key=x", "/api/rates", "/static/console.css"} {
		for _, auth := range []string{"", "Bearer wrong", "Bearer " + token + "x", "Basic " + basic("ops", "wrong"), "Basic " + basic("root", "pa55word-long-enough"), "Token " + token} {
			req, _ := http.NewRequest("GET", b.srv.URL+path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("GET %s with %q: %d %q, want 401 with a Basic challenge", path, auth, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
			}
			if resp.Header.Get("X-Frame-Options") != "DENY" {
				t.Errorf("a 401 has no X-Frame-Options")
			}
		}
	}
	for _, auth := range []string{"Bearer " + token, "bearer " + token, "Basic " + basic("anyone", token), "Basic " + basic("ops", "pa55word-long-enough")} {
		req, _ := http.NewRequest("GET", b.srv.URL+"/static/console.js", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET with %q: %d, want 200", auth, resp.StatusCode)
		}
	}
	// A release without the credential changes nothing.
	tok := b.running(t, "a|k")
	req, _ := http.NewRequest("POST", b.srv.URL+"/release", strings.NewReader(url.Values{"key": {"a|k"}, "token": {"1"}, "confirm": {"yes"}, "force": {"yes"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("unauthenticated release: %d", resp.StatusCode)
	}
	if rec, _ := b.st.Get(context.Background(), "a|k"); rec.Token != tok || console.ConditionOf(rec, time.Now()) != console.Running {
		t.Fatalf("an unauthenticated release changed the record: %+v", rec)
	}
}

func basic(u, p string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(u, p)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	req, _ := http.NewRequest("GET", b.srv.URL+"/", nil)
	_, _, h := b.client(t).do(req)
	for name, want := range map[string]string{
		"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
	} {
		if h.Get(name) != want {
			t.Errorf("%s: %q, want %q", name, h.Get(name), want)
		}
	}
	csp := h.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	ck := h.Get("Set-Cookie")
	if !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") {
		t.Errorf("session cookie %q", ck)
	}
}

// TestReleaseCSRF: a release is a POST from the console's own page with its session's token:
// without the token, with another session's, without the session cookie, from another site
// or origin, or as a GET, it is refused (403, or 405 for the GET) and the key stays claimed.
func TestReleaseCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.stale(t, "t|stale")
	c := b.client(t)
	form := c.releaseForm("t|stale")
	other := b.client(t)
	otherForm := other.releaseForm("t|stale")

	without := func(k string) url.Values {
		f := url.Values{}
		for n, v := range form {
			if n != k {
				f[n] = v
			}
		}
		return f
	}
	wrong := without("csrf")
	wrong.Set("csrf", otherForm.Get("csrf"))
	for name, tc := range map[string]struct {
		c    *client
		form url.Values
		hdr  map[string]string
	}{
		"no token":              {c, without("csrf"), nil},
		"another session's":     {c, wrong, nil},
		"no session cookie":     {&client{t: t, srv: b.srv, jar: map[string]*http.Cookie{}}, form, nil},
		"cross-site":            {c, form, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"same-site, not origin": {c, form, map[string]string{"Sec-Fetch-Site": "same-site"}},
		"another origin":        {c, form, map[string]string{"Sec-Fetch-Site": "", "Origin": "https://evil.example"}},
	} {
		code, body := tc.c.post("/release", tc.form, tc.hdr)
		if code != http.StatusForbidden {
			t.Errorf("%s: %d, want 403\n%s", name, code, body)
		}
	}
	if code, _ := c.get("/release?key=t|stale&token=1&confirm=yes&csrf=" + url.QueryEscape(form.Get("csrf"))); code != 200 {
		t.Errorf("GET /release: %d, want the confirmation page", code)
	}
	if rec, _ := b.st.Get(context.Background(), "t|stale"); console.ConditionOf(rec, time.Now()) != console.Stale {
		t.Fatalf("a refused release changed the record: %v", console.ConditionOf(rec, time.Now()))
	}
	// The same form from the console's page releases it, and the log says who and which key.
	code, body := c.post("/release", form, nil)
	if code != 200 || !strings.Contains(body, "released the stale claim") {
		t.Fatalf("release: %d\n%s", code, body)
	}
	if rec, _ := b.st.Get(context.Background(), "t|stale"); console.ConditionOf(rec, time.Now()) != console.Released {
		t.Fatalf("after release: %v", console.ConditionOf(rec, time.Now()))
	}
	logs := b.logs.String()
	if !strings.Contains(logs, `msg="console: release"`) || !strings.Contains(logs, `who=token`) || !strings.Contains(logs, `key=t|stale`) || !strings.Contains(logs, "remote=127.0.0.1") {
		t.Fatalf("release log:\n%s", logs)
	}
}

// TestReleaseRules: the console applies the rules of `idem release`: a running or held key
// (lease live) and a completed one are refused without force; with force they are released
// (deleted for a completed one); a stale one is released without force; a record whose
// token changed since the confirmation is refused.
func TestReleaseRules(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := b.client(t)
	b.running(t, "t|running")
	b.held(t, "t|held")
	b.completed(t, "t|done", idem.Response{Status: 201, Body: []byte("ok")})
	for _, key := range []string{"t|running", "t|held", "t|done"} {
		form := c.releaseForm(key)
		code, body := c.post("/release", form, nil)
		if code != http.StatusConflict || !strings.Contains(body, "force") {
			t.Errorf("%s without force: %d, want 409\n%s", key, code, body)
		}
		rec, err := b.st.Get(context.Background(), key)
		if err != nil || console.ConditionOf(rec, time.Now()) == console.Released {
			t.Fatalf("%s was released without force: %v %v", key, err, rec)
		}
		form.Set("force", "yes")
		if code, body = c.post("/release", form, nil); code != 200 {
			t.Errorf("%s with force: %d\n%s", key, code, body)
		}
		rec, err = b.st.Get(context.Background(), key)
		if !errors.Is(err, idem.ErrNotFound) && console.ConditionOf(rec, time.Now()) != console.Released {
			t.Errorf("%s after a forced release: %v %v", key, console.ConditionOf(rec, time.Now()), err)
		}
	}
	if !strings.Contains(b.logs.String(), `msg="console: release refused"`) {
		t.Errorf("refusals are not logged:\n%s", b.logs.String())
	}
	// A confirmation is for the claim it showed: a takeover since is refused.
	b.stale(t, "t|moved")
	form := c.releaseForm("t|moved")
	if _, err := b.st.Reserve(context.Background(), idem.ReserveRequest{Key: "t|moved", Fingerprint: fp, Now: time.Now(), Lease: time.Hour, TTL: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	form.Set("force", "yes")
	if code, body := c.post("/release", form, nil); code != http.StatusConflict || !strings.Contains(body, "changed since") {
		t.Fatalf("release of a record taken over since: %d\n%s", code, body)
	}
}

// TestRecordPageEscapes: a key, a header and a body made of markup are shown as text, never
// as markup; a credential in a stored header is never shown; a binary body is shown as hex.
func TestRecordPageEscapes(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *console.Options) { o.HiddenHeaders = []string{"X-Tenant"} })
	key := `t|<script>alert("key")</script>`
	b.completed(t, key, idem.Response{Status: 200, Header: map[string][]string{
		"X-Note":        {`<img src=x onerror=alert("hdr")>`},
		"Set-Cookie":    {"sid=SECRET-COOKIE-VALUE; HttpOnly"},
		"X-Api-Key":     {"SECRET-API-KEY"},
		"X-Tenant":      {"SECRET-TENANT"},
		"Authorization": {"Bearer SECRET-BEARER"},
	}, Body: []byte(`</pre><script>alert("body")</script>`)})
	c := b.client(t)
	for _, path := range []string{"/", "/record?key=" + url.QueryEscape(key), "/release?key=" + url.QueryEscape(key)} {
		code, page := c.get(path)
		if code != 200 {
			t.Fatalf("%s: %d", path, code)
		}
		for _, bad := range []string{"<script>alert", "<img src=x", "SECRET-"} {
			if strings.Contains(page, bad) {
				t.Errorf("%s shows %q:\n%s", path, bad, page)
			}
		}
		if !strings.Contains(page, "&lt;script&gt;alert(&#34;key&#34;)") {
			t.Errorf("%s does not show the key escaped:\n%s", path, page)
		}
	}
	_, page := c.get("/record?key=" + url.QueryEscape(key))
	for _, want := range []string{"&lt;img src=x onerror=alert(&#34;hdr&#34;)&gt;", "&lt;/pre&gt;&lt;script&gt;alert(&#34;body&#34;)", "(hidden: 33 bytes)"} {
		if !strings.Contains(page, want) {
			t.Errorf("record page lacks %q:\n%s", want, page)
		}
	}

	bin := []byte{0x00, 0xff, 0xfe, '<', 'b', '>', 0x1b, '[', '2', 'J', 0x80}
	b.completed(t, "t|bin", idem.Response{Status: 200, Body: bin})
	_, page = c.get("/record?key=t%7Cbin")
	if !strings.Contains(page, "00 ff fe 3c 62 3e 1b 5b  32 4a 80") || strings.Contains(page, "\x1b") || strings.Contains(page, "\xff") || strings.Contains(page, "<b>") {
		t.Errorf("binary body not shown as hex:\n%s", page)
	}
	big := bytes.Repeat([]byte("a"), 100<<10)
	b.completed(t, "t|big", idem.Response{Status: 200, Body: big})
	_, page = c.get("/record?key=t%7Cbig")
	if !strings.Contains(page, "102400 bytes (the first 65536 shown)") || len(page) > 80<<10 {
		t.Errorf("a large body is not cut for display: page of %d bytes", len(page))
	}
}

// TestList: the filters find records by condition, age, client key and tenant; stuck records
// are marked.
func TestList(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *console.Options) { o.ScopeSecret = []byte("0123456789abcdef-scope") })
	alice := idemhttp.KeyedHashScope([]byte("0123456789abcdef-scope"), "alice-api-key")
	bob := idemhttp.KeyedHashScope([]byte("0123456789abcdef-scope"), "bob-api-key")
	b.completed(t, alice+"|order-1", idem.Response{Status: 201})
	b.running(t, alice+"|order-2")
	b.stale(t, bob+"|order-1")
	b.held(t, bob+"|pay-9")
	b.completed(t, "consumer-key", idem.Response{})
	c := b.client(t)
	keys := regexp.MustCompile(`class="key" href="/record\?key=([^"]+)"`)
	found := func(q string) []string {
		t.Helper()
		code, page := c.get("/?" + q)
		if code != 200 {
			t.Fatalf("list %s: %d\n%s", q, code, page)
		}
		var out []string
		for _, m := range keys.FindAllStringSubmatch(page, -1) {
			k, _ := url.QueryUnescape(m[1])
			out = append(out, k)
		}
		return out
	}
	check := func(q string, want ...string) {
		t.Helper()
		got := found(q)
		if strings.Join(sorted(got), ",") != strings.Join(sorted(want), ",") {
			t.Errorf("list %s: %v, want %v", q, got, want)
		}
	}
	check("", alice+"|order-1", alice+"|order-2", bob+"|order-1", bob+"|pay-9", "consumer-key")
	check("state=stuck", bob+"|order-1", bob+"|pay-9")
	check("state=running", alice+"|order-2")
	check("state=completed", alice+"|order-1", "consumer-key")
	check("key=order-", alice+"|order-1", alice+"|order-2", bob+"|order-1")
	check("tenant="+alice[:8], alice+"|order-1", alice+"|order-2")
	check("tenant="+bob+"&key=order", bob+"|order-1")
	check("older=1m", bob+"|order-1")
	if code, _ := c.get("/?state=bogus"); code != http.StatusBadRequest {
		t.Errorf("an unknown state: %d, want 400", code)
	}
	// A tenant found by its identity: the identity is posted, and the redirect names its hash.
	form := url.Values{"csrf": {csrfRe.FindStringSubmatch(mustGet(t, c, "/"))[1]}, "identity": {"bob-api-key"}, "key": {"pay"}}
	req, _ := http.NewRequest("POST", b.srv.URL+"/tenant", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	code, _, h := c.do(req)
	if loc := h.Get("Location"); code != http.StatusSeeOther || !strings.Contains(loc, "tenant="+bob) || strings.Contains(loc, "bob-api-key") {
		t.Fatalf("tenant lookup: %d %q", code, loc)
	}
	check(strings.TrimPrefix(h.Get("Location"), "/?"), bob+"|pay-9")
}

func mustGet(t *testing.T, c *client, path string) string {
	t.Helper()
	code, page := c.get(path)
	if code != 200 {
		t.Fatalf("%s: %d", path, code)
	}
	return page
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestRates: the chart's endpoint turns the gateway's cumulative counters into rates per
// outcome group; a console without them says rates are off.
func TestRates(t *testing.T) {
	t.Parallel()
	var executed, conflicts atomic.Int64
	b := setup(t, func(o *console.Options) {
		o.RateStep = 50 * time.Millisecond
		o.Rates = func() map[string]float64 {
			return map[string]float64{"executed": float64(executed.Load()), "in_flight": float64(conflicts.Load()), "bypass": 1e6}
		}
	})
	c := b.client(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		executed.Add(10)
		conflicts.Add(1)
		time.Sleep(20 * time.Millisecond)
		_, body := c.get("/api/rates")
		var r struct {
			Enabled bool
			Series  map[string][]float64
			Now     map[string]float64
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatal(err)
		}
		if !r.Enabled {
			t.Fatalf("rates off: %s", body)
		}
		if r.Now["new"] > 0 && r.Now["409"] > 0 && r.Now["new"] > r.Now["409"] && r.Now["replay"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rates never showed the counters: %s", body)
		}
	}
	off := setup(t, nil)
	_, body := off.client(t).get("/api/rates")
	if !strings.Contains(body, `"enabled":false`) {
		t.Fatalf("rates without a source: %s", body)
	}
	if _, page := off.client(t).get("/"); !strings.Contains(page, "--console-listen") {
		t.Fatalf("a console without rates does not say where they are")
	}
}

// TestRateDefaults: the chart reads the counters every 5 seconds by default and shows 15
// minutes of the past, and never less than two steps, whatever RateWindow says.
func TestRateDefaults(t *testing.T) {
	t.Parallel()
	counters := func() map[string]float64 { return map[string]float64{"executed": 1} }
	// series returns the number of steps /api/rates shows, and its step in seconds.
	series := func(c *client) (int, float64) {
		_, body := c.get("/api/rates")
		var r struct {
			Step   float64 `json:"step_seconds"`
			Series map[string][]float64
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatal(err)
		}
		return len(r.Series["new"]), r.Step
	}
	// steps waits until /api/rates shows at least n steps, and returns how many it shows then.
	steps := func(c *client, n int) int {
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, _ := series(c)
			if got >= n || time.Now().After(deadline) {
				return got
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	def := setup(t, func(o *console.Options) { o.Rates = counters })
	if _, step := series(def.client(t)); step != 5 {
		t.Errorf("default step %vs, want 5s", step)
	}

	// A millisecond step and the default window: 15 minutes are 900,000 steps, so the series
	// grows well past a few.
	long := setup(t, func(o *console.Options) { o.Rates = counters; o.RateStep = time.Millisecond })
	if got := steps(long.client(t), 10); got < 10 {
		t.Errorf("default window: %d steps shown after 10s of 1ms steps, want at least 10", got)
	}

	// A window shorter than two steps is two steps: the series reaches 2 and stays there.
	short := setup(t, func(o *console.Options) {
		o.Rates = counters
		o.RateStep = time.Millisecond
		o.RateWindow = time.Nanosecond
	})
	c := short.client(t)
	if got := steps(c, 2); got != 2 {
		t.Fatalf("window of 1ns with 1ms steps: %d steps shown, want 2", got)
	}
	time.Sleep(20 * time.Millisecond)
	if got, _ := series(c); got != 2 {
		t.Errorf("window of 1ns with 1ms steps: %d steps shown later, want 2", got)
	}
}

// TestRoute: the list has a route column and the record page shows the route, escaped; a
// record without one shows a dash.
func TestRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	if _, err := b.st.Reserve(ctx, idem.ReserveRequest{Key: "t|routed", Fingerprint: fp, Route: `POST /v1/orders/{id}/<b>pay</b>`, Now: b.now, Lease: time.Hour, TTL: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	b.running(t, "t|plain")
	c := b.client(t)
	list := mustGet(t, c, "/")
	if !strings.Contains(list, "<th>Route</th>") {
		t.Errorf("the list has no route column:\n%s", list)
	}
	routes := regexp.MustCompile(`<span class="route">([^<]*)</span>`).FindAllStringSubmatch(list, -1)
	// Both were claimed at b.now: records created in the same microsecond list in descending
	// key order.
	if len(routes) != 2 || routes[1][1] != "—" || routes[0][1] != "POST /v1/orders/{id}/&lt;b&gt;pay&lt;/b&gt;" {
		t.Errorf("routes listed: %q", routes)
	}
	for key, want := range map[string]string{"t|routed": `<code id="route">POST /v1/orders/{id}/&lt;b&gt;pay&lt;/b&gt;</code>`, "t|plain": `<code id="route">—</code>`} {
		if page := mustGet(t, c, "/record?key="+url.QueryEscape(key)); !strings.Contains(page, want) {
			t.Errorf("record page of %s lacks %s:\n%s", key, want, page)
		}
	}
}

// TestRecordPageShowsRequest: a record that retained its request shows it on its page while it
// is still running — method and target, headers, the body's first bytes and how large it was —
// as text, never as markup, and with hidden headers hidden; a record without one shows none.
// (Planted: the request left out of the page → this fails; printed without escaping → the
// markup check fails.)
func TestRecordPageShowsRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *console.Options) { o.HiddenHeaders = []string{"X-Tenant"} })
	sent := &idem.Request{Method: "POST", Target: `/v1/orders?q=<b>x</b>`, BodySize: 5000, Truncated: true,
		Header: map[string][]string{
			"Content-Type":  {"application/json"},
			"X-Note":        {`<img src=x onerror=alert("req")>`},
			"X-Tenant":      {"SECRET-TENANT"},
			"Authorization": {"[redacted]"},
		},
		Body: []byte(`{"amount":100,"note":"</pre><script>alert("body")</script>"}`)}
	if _, err := b.st.Reserve(context.Background(), idem.ReserveRequest{Key: "t|sent", Fingerprint: fp, Request: sent,
		Now: b.now, Lease: time.Hour, TTL: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	c := b.client(t)
	code, page := c.get("/record?key=t%7Csent")
	if code != 200 {
		t.Fatalf("record page: %d", code)
	}
	for _, want := range []string{
		`<code id="request-line">POST /v1/orders?q=&lt;b&gt;x&lt;/b&gt;</code>`,
		"<th>Content-Type</th><td class=\"\">application/json</td>",
		"&lt;img src=x onerror=alert(&#34;req&#34;)&gt;",
		"(hidden: 13 bytes)",
		"Request body, 5000 bytes (the first 60 kept)",
		`{&#34;amount&#34;:100,&#34;note&#34;:&#34;&lt;/pre&gt;&lt;script&gt;alert(&#34;body&#34;)&lt;/script&gt;&#34;}`,
		`id="request-cut"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("record page lacks %q:\n%s", want, page)
		}
	}
	for _, bad := range []string{"<script>alert", "<img src=x", "SECRET-TENANT", "<b>x"} {
		if strings.Contains(page, bad) {
			t.Errorf("record page shows %q", bad)
		}
	}
	b.running(t, "t|plain")
	if _, page := c.get("/record?key=t%7Cplain"); strings.Contains(page, "request-line") {
		t.Errorf("a record without a request shows one:\n%s", page)
	}
}
