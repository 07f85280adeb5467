package console

import (
	"cmp"
	"crypto/rand"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

//go:embed assets
var assets embed.FS

// Options configure a Console. Store and a credential (Token, or User and Password) are
// required; a token or password must pass CheckSecret.
type Options struct {
	// Store is the store whose records the console shows and releases. Required. Listing
	// needs a store that implements idem.Lister; with another, records are opened by key.
	Store idem.Store
	// Token is the credential an operator gives, as a bearer token (Authorization: Bearer) or
	// as the password of basic credentials with any user name (a browser's login prompt).
	Token string
	// User and Password are basic credentials, accepted besides Token. Neither is accepted
	// without the other.
	User, Password string
	// Rates returns the cumulative count of requests by outcome, as the gateway's
	// idem_requests_total counts them (executed, replayed, conflict, mismatch, store_error,
	// ...). Nil: the console shows records only, and says that rates need a gateway.
	Rates func() map[string]float64
	// RateStep is how often Rates is read (default 5s); RateWindow how much of the past the
	// chart shows (default 15m).
	RateStep, RateWindow time.Duration
	// ScopeSecret is the key of the gateway's scope HMAC. With it, an operator finds a
	// tenant's records from its identity (the scope header's value), which the console hashes
	// and never shows or logs. Default: none (tenants are searched by their hash).
	ScopeSecret []byte
	// HiddenHeaders are more header names whose stored values are never shown (the gateway's
	// key and scope headers, say). Credentials (Authorization, Cookie, Set-Cookie, and names
	// with token, secret, password, auth, session, key or signature in them) are always hidden.
	HiddenHeaders []string
	// StoreName names the store at the top of each page: a store URL without its secrets.
	StoreName string
	// StuckAfter is the age from which a running claim is shown as stuck (default 5m). Held
	// and stale claims are always stuck: they wait for their lease or an operator.
	StuckAfter time.Duration
	// Refresh is how often the front page refreshes its list of records while an operator
	// has not paused it (default 5s).
	Refresh time.Duration
	// Logger receives a line for every release, with who asked and from where. Default
	// slog.Default().
	Logger *slog.Logger
}

// Console is the operator's web console: an http.Handler. Close it to stop reading rates.
type Console struct {
	opt    Options
	log    *slog.Logger
	key    [32]byte // the HMAC key of CSRF tokens
	cross  *http.CrossOriginProtection
	rates  *sampler
	pages  map[string]*template.Template
	hidden map[string]bool
	mux    *http.ServeMux
}

// New returns a console for opt. It fails, with an error that wraps idem.ErrInvalidInput and
// names the field, without a store or a credential, with a user but no password (or a
// password but no user), or with a token or password that CheckSecret finds weak.
func New(opt Options) (*Console, error) {
	switch {
	case opt.Store == nil:
		return nil, fmt.Errorf("%w: console: Options.Store is required", idem.ErrInvalidInput)
	case opt.Token == "" && opt.User == "" && opt.Password == "":
		return nil, fmt.Errorf("%w: console: Options.Token, or Options.User and Options.Password, are required: the console never runs without a credential", idem.ErrInvalidInput)
	case opt.User == "" && opt.Password != "":
		return nil, fmt.Errorf("%w: console: Options.Password is set without Options.User", idem.ErrInvalidInput)
	case opt.User != "" && opt.Password == "":
		return nil, fmt.Errorf("%w: console: Options.User is set without Options.Password: a user is never let in without a password", idem.ErrInvalidInput)
	case opt.RateStep < 0 || opt.RateWindow < 0 || opt.StuckAfter < 0 || opt.Refresh < 0:
		return nil, fmt.Errorf("%w: console: Options.RateStep, RateWindow, StuckAfter and Refresh must not be negative", idem.ErrInvalidInput)
	}
	if opt.Token != "" {
		if err := CheckSecret(opt.Token); err != nil {
			return nil, fmt.Errorf("%w: console: Options.Token %w", idem.ErrInvalidInput, err)
		}
	}
	if opt.Password != "" {
		if err := CheckSecret(opt.Password); err != nil {
			return nil, fmt.Errorf("%w: console: Options.Password %w", idem.ErrInvalidInput, err)
		}
	}
	opt.RateStep = cmp.Or(opt.RateStep, 5*time.Second)
	opt.RateWindow = max(cmp.Or(opt.RateWindow, 15*time.Minute), 2*opt.RateStep)
	opt.StuckAfter = cmp.Or(opt.StuckAfter, DefaultStuckAfter)
	opt.Refresh = cmp.Or(opt.Refresh, 5*time.Second)
	c := &Console{opt: opt, log: cmp.Or(opt.Logger, slog.Default()), cross: http.NewCrossOriginProtection(), hidden: map[string]bool{}}
	if _, err := rand.Read(c.key[:]); err != nil {
		return nil, err
	}
	for _, h := range opt.HiddenHeaders {
		c.hidden[strings.ToLower(h)] = true
	}
	var err error
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(assets, "assets/static")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.list)
	mux.HandleFunc("GET /record", c.record)
	mux.HandleFunc("GET /release", c.confirm)
	mux.HandleFunc("POST /release", c.release)
	mux.HandleFunc("POST /tenant", c.tenant)
	mux.HandleFunc("GET /api/rates", c.ratesJSON)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	c.mux = mux
	if opt.Rates != nil {
		c.rates = newSampler(opt.Rates, opt.RateStep, opt.RateWindow)
	}
	return c, nil
}

// Close stops reading rates. The handler still serves records after it.
func (c *Console) Close() error {
	if c.rates != nil {
		c.rates.close()
	}
	return nil
}

// ServeHTTP serves the console: every answer carries security headers, and every request
// must carry the console's credential (401 without it).
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	securityHeaders(w.Header())
	if c.authenticate(r) == "" {
		w.Header().Set("WWW-Authenticate", `Basic realm="idem console", charset="UTF-8"`)
		http.Error(w, "401 unauthorized: the idem console needs its token (Authorization: Bearer, or as the password of basic credentials)", http.StatusUnauthorized)
		return
	}
	c.mux.ServeHTTP(w, r)
}

func (c *Console) ratesJSON(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	out := ratesJSON{}
	if c.rates != nil {
		out = c.rates.rates()
	}
	_ = json.NewEncoder(w).Encode(out)
}

// page is what every page template gets.
type page struct {
	Title string
	Store string
	CSRF  string
	Rates bool
}

func (c *Console) page(w http.ResponseWriter, r *http.Request, title string) page {
	return page{Title: title, Store: c.opt.StoreName, CSRF: c.csrfToken(c.session(w, r)), Rates: c.rates != nil}
}

// render writes the named page with status.
func (c *Console) render(w http.ResponseWriter, status int, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	if err := c.pages[name].ExecuteTemplate(&b, "layout", data); err != nil {
		c.log.Error("console: rendering a page", "page", name, "err", err)
		http.Error(w, "500 internal error", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{"printable": printable}
	layout, err := template.New("layout").Funcs(funcs).ParseFS(assets, "assets/layout.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"list", "record", "confirm", "result"} {
		t, err := template.Must(layout.Clone()).ParseFS(assets, "assets/"+name+".html")
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}
