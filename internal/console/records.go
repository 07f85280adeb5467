package console

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/storekit"
)

// Bounds of what one list page reads and shows, and of a body shown on a record's page.
const (
	maxScan     = 5000     // records read from the store for one list page
	maxRows     = 200      // records shown on one list page
	maxTextBody = 64 << 10 // bytes of a text body shown
	maxHexBody  = 4 << 10  // bytes of a binary body shown, as hex
	separator   = idem.ScopeSeparator
	stuckState  = "stuck" // the list filter for claims that wait on their lease or an operator
	anyState    = "any"   // the list filter for every record
	timeLayout  = time.RFC3339
)

// states are the list filter's choices, in the order the form shows them.
var states = []string{anyState, stuckState, string(Running), string(Held), string(Stale), string(Completed), string(Released), string(Expired)}

// filter is a list page's query.
type filter struct {
	State     string
	OlderThan string
	Since     string // created at or after: a time, or a duration back from now
	Until     string // created before: a time, or a duration back from now
	Route     string // the route, exactly
	Status    string // the response status
	Key       string // the start of a client's key
	Tenant    string // the start of a scope (a tenant's hash)
	Cursor    string
	older     time.Duration
	since     time.Time
	until     time.Time
	status    int
}

// values returns f as a list URL's query, without its cursor.
func (f filter) values() url.Values {
	q := url.Values{}
	for _, p := range [][2]string{{"state", f.State}, {"older", f.OlderThan}, {"since", f.Since}, {"until", f.Until},
		{"route", f.Route}, {"status", f.Status}, {"key", f.Key}, {"tenant", f.Tenant}} {
		if p[1] != "" && !(p[0] == "state" && p[1] == anyState) {
			q.Set(p[0], p[1])
		}
	}
	return q
}

// row is one listed record.
type row struct {
	Key, ClientKey, Tenant, TenantFull string
	Route                              string // printable, "—" for none
	Condition                          Condition
	Stuck                              bool
	Age, LeaseLeft, Status             string
	Attempts                           int
	created                            time.Time
}

type listView struct {
	page
	Filter   filter
	States   []string
	Rows     []row
	CanList  bool
	Scanned  int
	Next     string // the URL of the next page, "" for none
	KeyOrder bool   // the store lists in key order only: rows are the newest of those read
	// RefreshMillis is how often the page refreshes its list, in milliseconds.
	RefreshMillis int64
	Err           string
	HasSecret     bool
}

// splitKey splits a storage key into its scope and client key; a key that idem.ScopedKey did
// not make (one passed to Engine.Do as it is) has no scope.
func splitKey(key string) (scope, client string, scoped bool) {
	if scope, client, ok := idem.SplitScopedKey(key); ok {
		return scope, client, true
	}
	return "", key, false
}

// shortTenant is the first 8 characters of a scope, enough to tell tenants apart on a page.
func shortTenant(scope string, scoped bool) string {
	switch {
	case !scoped:
		return "—"
	case scope == "":
		return "(none)"
	case len(scope) > 8:
		return scope[:8]
	}
	return scope
}

// printable returns s as it is if every rune is printable, else Go-quoted, so that a key or
// header cannot hide characters from the operator. html/template escapes the result.
func printable(s string) string {
	for _, c := range s {
		if c == utf8.RuneError || !unicode.IsPrint(c) {
			return strconv.Quote(s)
		}
	}
	return s
}

// stuck reports whether rec is stuck at now (Stuck, with Options.StuckAfter).
func (c *Console) stuck(rec idem.Record, now time.Time) bool {
	return Stuck(rec, now, c.opt.StuckAfter)
}

func (c *Console) row(rec idem.Record, now time.Time) row {
	scope, client, scoped := splitKey(rec.Key)
	cond := ConditionOf(rec, now)
	r := row{
		Key: rec.Key, ClientKey: client, Tenant: shortTenant(scope, scoped), TenantFull: scope, Condition: cond,
		Stuck: c.stuck(rec, now), Age: age(now.Sub(rec.CreatedAt)), Attempts: Starts(rec), Status: "—", created: rec.CreatedAt,
		Route: routeText(rec.Route),
	}
	if cond.Live() {
		r.LeaseLeft = age(rec.LeaseUntil.Sub(now))
	}
	if rec.Response != nil {
		r.Status = strconv.Itoa(rec.Response.Status)
		if rec.Response.BodyOmitted {
			r.Status += " (body not kept)"
		}
	}
	return r
}

// routeText is a record's route for display: printable, or "—" when it has none.
func routeText(route string) string {
	if route == "" {
		return "—"
	}
	return printable(route)
}

// age rounds d for display: seconds under an hour, minutes under a day.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 24*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd%s", int(d/(24*time.Hour)), (d % (24 * time.Hour)).Round(time.Hour))
}

// timeLayouts are the forms a time filter takes besides a duration back from now: RFC 3339,
// and what a browser's datetime-local input sends (read as UTC).
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"}

// parseWhen reads a time filter: a duration back from now ("15m") or a time.
func parseWhen(s string, now time.Time) (time.Time, bool) {
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), true
	}
	for _, l := range timeLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

func readFilter(r *http.Request, now time.Time) (filter, error) {
	q := r.URL.Query()
	f := filter{State: q.Get("state"), OlderThan: strings.TrimSpace(q.Get("older")), Key: q.Get("key"),
		Tenant: strings.TrimSpace(q.Get("tenant")), Cursor: q.Get("cursor"), Since: strings.TrimSpace(q.Get("since")),
		Until: strings.TrimSpace(q.Get("until")), Route: q.Get("route"), Status: strings.TrimSpace(q.Get("status"))}
	for _, w := range []struct {
		name, v string
		t       *time.Time
	}{{"since", f.Since, &f.since}, {"until", f.Until, &f.until}} {
		if w.v == "" {
			continue
		}
		t, ok := parseWhen(w.v, now)
		if !ok {
			return f, fmt.Errorf("%s %q: want a duration back from now (15m, 2h) or a time (2006-01-02T15:04, RFC 3339)", w.name, w.v)
		}
		*w.t = t
	}
	if f.Status != "" {
		st, err := strconv.Atoi(f.Status)
		if err != nil || st < 100 || st > 999 {
			return f, fmt.Errorf("status %q: want an HTTP status such as 201", f.Status)
		}
		f.status = st
	}
	if f.State == "" {
		f.State = anyState
	}
	if !slices.Contains(states, f.State) {
		return f, fmt.Errorf("unknown state %q", f.State)
	}
	if f.OlderThan != "" {
		d, err := time.ParseDuration(f.OlderThan)
		if err != nil || d < 0 {
			return f, fmt.Errorf("older than %q: want a duration such as 10m or 2h", f.OlderThan)
		}
		f.older = d
	}
	if err := idem.CheckScope(f.Tenant); err != nil {
		return f, fmt.Errorf("tenant: not the start of a scope: %v", err)
	}
	return f, nil
}

// fullScope reports whether s is a whole scope hash: 64 hex digits.
func fullScope(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func (c *Console) list(w http.ResponseWriter, r *http.Request) {
	v := listView{page: c.page(w, r, "Records"), States: states, HasSecret: c.opt.ScopeSecret != nil, RefreshMillis: c.opt.Refresh.Milliseconds()}
	now := time.Now()
	f, err := readFilter(r, now)
	v.Filter = f
	lister, ok := c.opt.Store.(idem.Lister)
	v.CanList = ok
	switch {
	case err != nil:
		v.Err = err.Error()
		c.render(w, http.StatusBadRequest, "list", v)
		return
	case !ok:
		c.render(w, http.StatusOK, "list", v)
		return
	}
	var next string
	v.Rows, next, v.Scanned, v.KeyOrder, err = c.scan(r.Context(), lister, f, now)
	if next != "" {
		q := f.values()
		q.Set("cursor", next)
		v.Next = "/?" + q.Encode()
	}
	if err != nil {
		v.Err = "listing failed: " + err.Error()
		c.render(w, http.StatusBadGateway, "list", v)
		return
	}
	c.render(w, http.StatusOK, "list", v)
}

// scan reads at most maxScan records from the listing f selects, newest first across the
// store, and returns the (at most maxRows) that match f, with the cursor after the last
// record read when the listing goes on. A store that lists in key order only is read in key
// order, and the rows read are sorted newest first (keyOrder).
func (c *Console) scan(ctx context.Context, l idem.Lister, f filter, now time.Time) (rows []row, next string, scanned int, keyOrder bool, err error) {
	q := idem.ListQuery{Order: idem.ListNewestFirst, Cursor: f.Cursor, Limit: idem.MaxListLimit,
		CreatedSince: f.since, CreatedBefore: f.until, Route: f.Route, Status: f.status}
	switch f.State {
	case string(Completed):
		q.State = idem.StateCompleted
	case stuckState, string(Running), string(Held), string(Stale), string(Released):
		q.State = idem.StateInProgress
	}
	if f.status != 0 {
		q.State = idem.StateCompleted
	}
	if f.older > 0 && (q.CreatedBefore.IsZero() || now.Add(-f.older).Before(q.CreatedBefore)) {
		q.CreatedBefore = now.Add(-f.older)
	}
	// The storage key is SCOPE|KEY: a whole scope and a key's start are one key range; the
	// start of a scope is a range too. A key's start alone is checked record by record.
	switch {
	case fullScope(f.Tenant):
		q.Prefix = idem.ScopedKey(f.Tenant, f.Key)
	case f.Tenant != "":
		q.Prefix = f.Tenant
	}
	cursor := func(rec idem.Record) string { return storekit.NewestCursor(rec.Key, rec.CreatedAt) }
	for {
		page, err := l.List(ctx, q)
		if errors.Is(err, errors.ErrUnsupported) && q.Order == idem.ListNewestFirst {
			// A store that lists in key order only (a key-order cursor, if any, still works).
			q.Order, keyOrder, cursor = idem.ListByKey, true, func(rec idem.Record) string { return storekit.ListCursor(rec.Key) }
			continue
		}
		if err != nil {
			return nil, "", scanned, keyOrder, err
		}
		for i, rec := range page.Records {
			scanned++
			if c.matches(rec, f, now) {
				rows = append(rows, c.row(rec, now))
			}
			if len(rows) >= maxRows || scanned >= maxScan {
				if i < len(page.Records)-1 || page.Next != "" {
					next = cursor(rec)
				}
				return sortRows(rows, keyOrder), next, scanned, keyOrder, nil
			}
		}
		if page.Next == "" {
			return sortRows(rows, keyOrder), "", scanned, keyOrder, nil
		}
		q.Cursor = page.Next
	}
}

// sortRows sorts rows read in key order newest first; rows read newest first are left as they
// came.
func sortRows(rows []row, keyOrder bool) []row {
	if keyOrder {
		slices.SortStableFunc(rows, func(a, b row) int { return b.created.Compare(a.created) })
	}
	return rows
}

func (c *Console) matches(rec idem.Record, f filter, now time.Time) bool {
	scope, client, scoped := splitKey(rec.Key)
	if f.Tenant != "" && (!scoped || !strings.HasPrefix(scope, f.Tenant)) || !strings.HasPrefix(client, f.Key) ||
		f.Route != "" && rec.Route != f.Route || f.status != 0 && (rec.Response == nil || rec.Response.Status != f.status) {
		return false
	}
	cond := ConditionOf(rec, now)
	switch f.State {
	case anyState:
		return true
	case stuckState:
		return c.stuck(rec, now)
	}
	return string(cond) == f.State
}

// header is a stored header as the record page shows it.
type header struct {
	Name, Value string
	Hidden      bool
}

type recordView struct {
	page
	Key, ClientKey, Tenant, TenantFull string
	Condition                          Condition
	Explain                            string
	Stuck, Live                        bool
	Fingerprint                        string
	Route                              string // printable, "—" for none
	Token                              int64
	Attempts                           int
	Created, Expires, Lease, Completed string
	HasResponse                        bool
	Status                             int
	Headers                            []header
	BodyLen                            int
	BodyOmitted                        bool
	BodyText                           string
	BodyHex                            string
	BodyShown                          int
	CanRelease, NeedsForce             bool
	Message, Err                       string
	Request                            *requestView // what the client sent, when it was retained
}

// requestView is a retained request (idem.Record.Request) as the record page shows it.
type requestView struct {
	Method, Target    string // printable
	Headers           []header
	BodySize          int64 // the size of the body the client sent
	BodyKept          int   // how many of its first bytes the record keeps
	BodyText, BodyHex string
	BodyShown         int
	Truncated         bool
}

// requestView builds the view of r, nil for none. Credentials were redacted before r was
// stored; headers the console hides are hidden here as well.
func (c *Console) requestView(r *idem.Request) *requestView {
	if r == nil {
		return nil
	}
	v := &requestView{Method: printable(r.Method), Target: printable(r.Target), BodySize: r.BodySize, BodyKept: len(r.Body), Truncated: r.Truncated}
	v.Headers = c.headers(r.Header)
	v.BodyText, v.BodyHex, v.BodyShown = bodyView(r.Body)
	return v
}

// headers returns stored headers as a page shows them, sorted by name, the values of hidden
// ones replaced by their size.
func (c *Console) headers(h map[string][]string) []header {
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []header
	for _, n := range names {
		for _, val := range h[n] {
			if c.hiddenHeader(n) {
				out = append(out, header{Name: printable(n), Value: fmt.Sprintf("(hidden: %d bytes)", len(val)), Hidden: true})
				continue
			}
			out = append(out, header{Name: printable(n), Value: printable(val)})
		}
	}
	return out
}

// bodyView returns a body as a page shows it: text cut to maxTextBody bytes, or a hex dump of
// its first maxHexBody bytes when it is not text, and how many bytes are shown.
func bodyView(body []byte) (text, hexDump string, shown int) {
	if isText(body) {
		shown = min(len(body), maxTextBody)
		return strings.ToValidUTF8(string(body[:shown]), "\uFFFD"), "", shown // a cut may split a rune
	}
	shown = min(len(body), maxHexBody)
	return "", hex.Dump(body[:shown]), shown
}

// hiddenHeader reports whether a header's stored value may be a credential, never shown.
func (c *Console) hiddenHeader(name string) bool {
	n := strings.ToLower(name)
	return c.hidden[n] || idemhttp.CredentialHeader(n)
}

// view builds a record's page.
func (c *Console) view(w http.ResponseWriter, r *http.Request, rec idem.Record, now time.Time) recordView {
	scope, client, scoped := splitKey(rec.Key)
	cond := ConditionOf(rec, now)
	v := recordView{
		page: c.page(w, r, "Record"), Key: rec.Key, ClientKey: client, Tenant: shortTenant(scope, scoped), TenantFull: scope,
		Condition: cond, Explain: Explain(cond, rec, now), Stuck: c.stuck(rec, now), Live: cond.Live(),
		Fingerprint: rec.Fingerprint, Token: rec.Token, Attempts: Starts(rec), Route: routeText(rec.Route),
		Created: rec.CreatedAt.UTC().Format(timeLayout) + " (" + age(now.Sub(rec.CreatedAt)) + " ago)",
	}
	if cond != Released {
		v.Expires = rec.ExpiresAt.UTC().Format(timeLayout)
	}
	if rec.State == idem.StateInProgress && cond != Released {
		v.Lease = rec.LeaseUntil.UTC().Format(timeLayout)
	}
	if !rec.CompletedAt.IsZero() {
		v.Completed = rec.CompletedAt.UTC().Format(timeLayout)
	}
	v.CanRelease = cond != Released && cond != Expired
	v.NeedsForce = cond.Live() || cond == Completed
	if resp := rec.Response; resp != nil {
		v.HasResponse, v.Status, v.BodyLen, v.BodyOmitted = true, resp.Status, len(resp.Body), resp.BodyOmitted
		v.Headers = c.headers(resp.Header)
		v.BodyText, v.BodyHex, v.BodyShown = bodyView(resp.Body)
	}
	v.Request = c.requestView(rec.Request)
	return v
}

// isText reports whether b is UTF-8 without control characters other than tab and line breaks.
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f || r >= 0x80 && r < 0xa0 {
			return false
		}
	}
	return true
}

// get reads the record of the key a request names; on failure it renders the answer.
func (c *Console) get(w http.ResponseWriter, r *http.Request, key string) (idem.Record, bool) {
	if key == "" {
		c.render(w, http.StatusBadRequest, "result", recordView{page: c.page(w, r, "Record"), Err: "no key given"})
		return idem.Record{}, false
	}
	rec, err := c.opt.Store.Get(r.Context(), key)
	if errors.Is(err, idem.ErrNotFound) {
		c.render(w, http.StatusNotFound, "result", recordView{page: c.page(w, r, "Record"), Key: key,
			Err: "no record for this key: never claimed, or released or expired and deleted since"})
		return idem.Record{}, false
	}
	if err != nil {
		c.render(w, http.StatusBadGateway, "result", recordView{page: c.page(w, r, "Record"), Key: key, Err: "reading the record failed: " + err.Error()})
		return idem.Record{}, false
	}
	return rec, true
}

func (c *Console) record(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" && r.URL.Query().Has("client") {
		key = idem.ScopedKey(r.URL.Query().Get("tenant"), r.URL.Query().Get("client"))
	}
	rec, ok := c.get(w, r, key)
	if !ok {
		return
	}
	c.render(w, http.StatusOK, "record", c.view(w, r, rec, time.Now()))
}

// confirm shows what releasing a key would do, and asks for the confirmation (and, for a
// live lease or a completed record, for force) that POST /release requires.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request) {
	rec, ok := c.get(w, r, r.URL.Query().Get("key"))
	if !ok {
		return
	}
	v := c.view(w, r, rec, time.Now())
	v.Title = "Release"
	c.render(w, http.StatusOK, "confirm", v)
}

// release applies a confirmed release: POST only, with the session's CSRF token, from the
// console's own pages, under the same rules as `idem release`. Every release and every
// refusal is logged with who asked.
func (c *Console) release(w http.ResponseWriter, r *http.Request) {
	who := c.authenticate(r)
	if !c.checkCSRF(r) {
		c.log.Warn("console: release refused: no valid CSRF token or a cross-origin request", "who", who, "remote", remoteAddr(r))
		http.Error(w, "403 forbidden: the release form's token is missing or stale, or the request came from another site; reload the record's page", http.StatusForbidden)
		return
	}
	key := r.PostFormValue("key")
	token, err := strconv.ParseInt(r.PostFormValue("token"), 10, 64)
	if err != nil || key == "" || r.PostFormValue("confirm") != "yes" {
		c.render(w, http.StatusBadRequest, "result", recordView{page: c.page(w, r, "Release"), Key: key,
			Err: "a release needs the key, the token shown and the confirmation"})
		return
	}
	force := r.PostFormValue("force") == "yes"
	msg, err := Release(r.Context(), c.opt.Store, key, token, force, time.Now())
	attrs := []any{"who", who, "remote", remoteAddr(r), "key", key, "token", token, "force", force}
	v := recordView{page: c.page(w, r, "Release"), Key: key}
	switch {
	case errors.Is(err, ErrRefused):
		c.log.Warn("console: release refused", append(attrs, "reason", err.Error())...)
		v.Err = strings.TrimPrefix(err.Error(), ErrRefused.Error()+": ")
		c.render(w, http.StatusConflict, "result", v)
	case err != nil:
		c.log.Error("console: release failed", append(attrs, "err", err.Error())...)
		v.Err = "release failed: " + err.Error()
		c.render(w, http.StatusBadGateway, "result", v)
	default:
		c.log.Info("console: release", append(attrs, "result", msg)...)
		v.Message = msg
		c.render(w, http.StatusOK, "result", v)
	}
}

// tenant turns a tenant's identity (the scope header's value) into its hash under the scope
// secret and lists that tenant's records: the identity goes in a POST body, never in a URL or
// a log line.
func (c *Console) tenant(w http.ResponseWriter, r *http.Request) {
	if !c.checkCSRF(r) {
		http.Error(w, "403 forbidden: the form's token is missing or stale, or the request came from another site", http.StatusForbidden)
		return
	}
	if c.opt.ScopeSecret == nil {
		http.Error(w, "400 bad request: this console has no scope secret, so tenants are searched by their hash", http.StatusBadRequest)
		return
	}
	q := url.Values{"tenant": {idemhttp.KeyedHashScope(c.opt.ScopeSecret, r.PostFormValue("identity"))}}
	for _, p := range []string{"key", "state", "older", "since", "until", "route", "status"} {
		if v := r.PostFormValue(p); v != "" {
			q.Set(p, v)
		}
	}
	http.Redirect(w, r, "/?"+q.Encode(), http.StatusSeeOther)
}
