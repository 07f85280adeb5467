package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/store/storekit"
)

func init() {
	register("list", "list records in key order, by state, age and key prefix", runList)
}

// listed is one record as `idem list --json` prints it, one JSON object a line.
type listed struct {
	Key         string  `json:"key"`
	Scope       *string `json:"scope,omitempty"`      // the gateway's scope (an HMAC, or "" for none)
	ClientKey   string  `json:"client_key,omitempty"` // the client's key, for a key made by a gateway
	Condition   string  `json:"condition"`
	State       string  `json:"state"`
	CreatedAt   string  `json:"created_at"`
	Age         string  `json:"age"`
	Attempts    int     `json:"attempts"`
	Token       int64   `json:"token"`
	LeaseLeft   string  `json:"lease_left,omitempty"`
	ExpiresAt   string  `json:"expires_at"`
	Status      int     `json:"status,omitempty"`
	BodyOmitted bool    `json:"body_omitted,omitempty"`
	Route       string  `json:"route,omitempty"` // what claimed the key, such as "POST /v1/orders/{id}/pay"
}

func runList(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "list", "[--store URL] [--scope-value VALUE | --scope none] [--key PREFIX] [--state STATE] [--older-than DUR] [--limit N] [--cursor C] [--json]")
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprintln(e.stderr, "\nRecords come in storage-key order (SCOPE|KEY), expired ones included. With --scope-value\n"+
			"VALUE only the records of the caller that sent VALUE in the gateway's scope header are\n"+
			"listed (hashed as the gateway does, with the scope secret), with --scope none those of a\n"+
			"gateway without scope; --key then matches the start of the client's key. When more\n"+
			"records remain than --limit, the cursor to resume with is printed on stderr.\n\n"+conditionHelp)
	}
	store := storeFlag(e, fs)
	sc := bindScope(e, fs)
	state := fs.String("state", "any", "keep only records in this condition: "+strings.Join(listStates, ", ")+" (held, stale, or running for longer than --stuck-after)")
	stuckAfter := fs.Duration("stuck-after", console.DefaultStuckAfter, "the age from which a running claim counts as stuck, for --state stuck (the console's default)")
	olderThan := fs.Duration("older-than", 0, "keep only records created longer ago than this (e.g. 10m)")
	prefix := fs.String("key", "", "keep only keys that start with PREFIX: the client's key with --scope-value or --scope none, else the storage key (SCOPE|KEY)")
	limit := fs.Int("limit", 100, "print at most N records")
	cursor := fs.String("cursor", "", "resume a listing where a previous one stopped")
	asJSON := fs.Bool("json", false, "print one JSON object a line")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError("unexpected argument %q (filter keys with --key PREFIX)", pos[0])
	}
	scope, err := sc.scopePrefix()
	if err != nil {
		return err
	}
	now := time.Now()
	q := idem.ListQuery{Prefix: scope + *prefix, Cursor: *cursor}
	keep, err := stateFilter(*state, *stuckAfter, &q)
	if err != nil {
		return err
	}
	if *olderThan < 0 {
		return usageError("--older-than %v is negative", *olderThan)
	}
	if *olderThan > 0 {
		q.CreatedBefore = now.Add(-*olderThan)
	}
	if *limit <= 0 {
		return usageError("--limit %d: want at least 1", *limit)
	}
	if _, err := storekit.Bounds(q); err != nil {
		return usageError("%v", err)
	}
	st, err := openStore(ctx, e, *store)
	if err != nil {
		return err
	}
	defer st.Close()
	l, ok := st.(idem.Lister)
	if !ok {
		scheme, _, _ := strings.Cut(*store, "://")
		scheme = strings.ToLower(scheme)
		return fmt.Errorf("the %s:// store cannot list its records (the stores of %s can)", scheme, storeSchemes(scheme))
	}
	var tw *tabwriter.Writer
	if !*asJSON {
		tw = tabwriter.NewWriter(e.stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tSTATE\tAGE\tATTEMPTS\tLEASE LEFT\tSTATUS\tROUTE")
	}
	enc := json.NewEncoder(e.stdout)
	// Each page asks for no more records than remain to print, so the listing never reads past
	// the last record it prints and the cursor resumes right after it.
	printed, next := 0, ""
	for printed < *limit {
		q.Limit = min(*limit-printed, idem.MaxListLimit)
		page, err := l.List(ctx, q)
		if err != nil {
			return redactError(err, *store)
		}
		for _, rec := range page.Records {
			if !keep(rec, now) {
				continue
			}
			printed++
			r := listing(rec, now)
			if *asJSON {
				if err := enc.Encode(r); err != nil {
					return err
				}
				continue
			}
			status := "-"
			if r.Status != 0 || rec.Response != nil {
				status = strconv.Itoa(r.Status)
				if r.BodyOmitted {
					status += " (body not kept)"
				}
			}
			route := "-"
			if r.Route != "" {
				route = printable(r.Route)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", printable(r.Key), r.Condition, r.Age, r.Attempts, cmp.Or(r.LeaseLeft, "-"), status, route)
		}
		next = page.Next
		if next == "" {
			break
		}
		q.Cursor = next
	}
	if tw != nil {
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if next != "" {
		fmt.Fprintf(e.stderr, "more records: resume with --cursor %s\n", next)
	}
	return nil
}

// listStates are --state's values: the conditions inspect, list and the console show, stuck,
// and any.
var listStates = []string{"any", "stuck", string(console.Running), string(console.Held), string(console.Stale),
	string(console.Released), string(console.Completed), string(console.Expired)}

// stateFilter returns the filter of --state name, narrowing q to the stored state where the
// condition implies one. A state word the tools do not show is refused, naming the ones
// they do.
func stateFilter(name string, stuckAfter time.Duration, q *idem.ListQuery) (func(idem.Record, time.Time) bool, error) {
	switch name {
	case "any", "":
		return func(idem.Record, time.Time) bool { return true }, nil
	case "in_progress", "in-progress", "inprogress":
		return nil, usageError("--state %s: a claim in progress is running, held, stale or released (stuck: held, stale or running for longer than --stuck-after); want one of %s", name, strings.Join(listStates, ", "))
	case "stuck":
		if stuckAfter < 0 {
			return nil, usageError("--stuck-after %v is negative", stuckAfter)
		}
		q.State = idem.StateInProgress
		return func(rec idem.Record, now time.Time) bool { return console.Stuck(rec, now, stuckAfter) }, nil
	}
	if !slices.Contains(listStates, name) {
		return nil, usageError("--state %q: want one of %s", name, strings.Join(listStates, ", "))
	}
	want := console.Condition(name)
	switch want {
	case console.Running, console.Held, console.Stale, console.Released:
		q.State = idem.StateInProgress
	case console.Completed:
		q.State = idem.StateCompleted
	}
	return func(rec idem.Record, now time.Time) bool { return console.ConditionOf(rec, now) == want }, nil
}

// listing describes rec at now.
func listing(rec idem.Record, now time.Time) listed {
	cond := console.ConditionOf(rec, now)
	r := listed{
		Key: rec.Key, Condition: string(cond), State: rec.State.String(),
		CreatedAt: rec.CreatedAt.UTC().Format(time.RFC3339Nano), Age: now.Sub(rec.CreatedAt).Round(time.Second).String(),
		Attempts: console.Starts(rec), Token: rec.Token, ExpiresAt: rec.ExpiresAt.UTC().Format(time.RFC3339Nano),
		Route: rec.Route,
	}
	if scope, client, ok := splitKey(rec.Key); ok {
		r.Scope, r.ClientKey = &scope, client
	}
	if cond.Live() {
		r.LeaseLeft = rec.LeaseUntil.Sub(now).Round(time.Second).String()
	}
	if rec.Response != nil {
		r.Status, r.BodyOmitted = rec.Response.Status, rec.Response.BodyOmitted
	}
	return r
}

// printable returns key as it is if every rune is printable, else quoted, so that a key cannot
// break the table or the terminal.
func printable(key string) string {
	for _, c := range key {
		if c == utf8.RuneError || !unicode.IsPrint(c) {
			return strconv.Quote(key)
		}
	}
	return key
}
