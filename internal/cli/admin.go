package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/store/storeurl"
	"github.com/idemkit/idem/store/sweeper"
)

const defaultStore = "sqlite://./idem.db"

func init() {
	register("migrate", "create or upgrade the store's schema", runMigrate)
	register("sweep", "delete expired records now", runSweep)
	register("inspect", "show the record of a key: running, held, stale, released, completed or expired", runInspect)
	register("release", "free a key whose holder is gone (refused while its lease is live, unless --force)", runRelease)
}

// storeFlag adds --store with its env var and default.
func storeFlag(e *env, fs interface {
	StringVar(*string, string, string, string)
}) *string {
	var s string
	def := defaultStore
	if v := e.getenv("IDEM_STORE"); v != "" {
		def = v
	}
	fs.StringVar(&s, "store", def, "store URL (env IDEM_STORE): sqlite://FILE, memory://, postgres://…, mysql://…, redis://…, redis+cluster://…, dynamodb://TABLE")
	return &s
}

// openStore opens the store at raw for a command that reports its own failure: the store
// clients' own lines (go-redis retrying a dial, say) go to stderr only at level error, so a
// store that is down gives one line, the command's, and not one per attempt.
func openStore(ctx context.Context, e *env, raw string) (storeurl.Store, error) {
	return openStoreLogging(ctx, raw, newLogger(e.stderr, "text", "error"))
}

// openStoreLogging opens the store at raw with the store clients' lines going to log.
func openStoreLogging(ctx context.Context, raw string, log *slog.Logger) (storeurl.Store, error) {
	storeurl.SetLogger(log)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := storeurl.Open(ctx, raw)
	return st, redactError(err, raw)
}

// openRecord parses a subcommand's flags and its one KEY argument (a storage key, or a client
// key with the scope flags), opens the store and reads the key's record. On success the
// caller closes the store.
func openRecord(ctx context.Context, e *env, fs *flag.FlagSet, args []string, store *string, sc *scopeFlags) (storeurl.Store, idem.Record, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, idem.Record{}, err
	}
	if len(pos) != 1 {
		return nil, idem.Record{}, usageError("want exactly one KEY: the client's key with --scope-value VALUE or --scope none, else the storage key SCOPE|KEY")
	}
	key, err := sc.storageKey(pos[0])
	if err != nil {
		return nil, idem.Record{}, err
	}
	st, err := openStore(ctx, e, *store)
	if err != nil {
		return nil, idem.Record{}, err
	}
	rec, err := st.Get(ctx, key)
	if err != nil {
		st.Close()
		if errors.Is(err, idem.ErrNotFound) {
			return nil, idem.Record{}, fmt.Errorf("no record for key %q: never claimed, or released or expired and deleted since%s", key, notFoundHint(sc))
		}
		return nil, idem.Record{}, redactError(err, *store)
	}
	return st, rec, nil
}

// notFoundHint says what else to check when a client key's record is not found.
func notFoundHint(sc *scopeFlags) string {
	switch {
	case sc.given():
		return " (or the scope value or the scope secret is not the gateway's)"
	case sc.scoped():
		return ""
	}
	return " (KEY is the storage key SCOPE|KEY: for a client's key add --scope-value VALUE or --scope none)"
}

// parseInterspersed parses flags given before, between or after the positional arguments
// (inspect KEY --store URL as well as inspect --store URL KEY) and returns the positional
// ones. An argument "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parse(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// parseNoArgs parses the flags of a command that takes no argument, wherever they are.
func parseNoArgs(fs *flag.FlagSet, args []string) error {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("unexpected argument %q", pos[0])
	}
	return nil
}

// keyHelp says what a KEY argument is, for inspect's and release's help.
const keyHelp = `KEY is what the client sent as its Idempotency-Key, with --scope-value VALUE (VALUE: what it
sent in the gateway's scope header, such as its API key; hashed with the HMAC under the scope
secret from IDEM_SCOPE_SECRET, --scope-secret-file or --scope-secret, as the gateway does) or
with --scope none (a gateway run with --scope none, or a request sent without the scope
header). Without them KEY is the storage key, SCOPE|KEY, as idem list shows it. Flags may come
before or after KEY.`

// conditionHelp names the conditions inspect, list and release show.
const conditionHelp = `The condition shown is one of: running (in progress, its lease live and renewed by its
holder), held (an uncertain outcome kept until expiry), stale (lease ran out: the next retry
takes over), released (the next request executes), completed (retries get the stored
response), expired (counts as absent).`

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "migrate", "[--store URL]")
	store := storeFlag(e, fs)
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	st, err := openStore(ctx, e, *store)
	if err != nil {
		return err
	}
	defer st.Close()
	if m, ok := st.(storeurl.Migrator); ok {
		if err := m.Migrate(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintln(e.stdout, "schema is up to date")
	return nil
}

func runSweep(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "sweep", "[--store URL] [--batch N] [--max-share F] [--target-latency D]")
	store := storeFlag(e, fs)
	batch := fs.Int("batch", 1000, "records deleted per statement, at most")
	share := fs.Float64("max-share", 1, "largest fraction of the time spent in the store, above 0 to 1: 0.1 pauses nine times as long as each statement took, leaving the store to live traffic; 1 sweeps without a pause")
	target := fs.Duration("target-latency", 100*time.Millisecond, "a statement that takes longer halves the next batch")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	if *batch < 1 {
		return usageError("--batch must be at least 1")
	}
	if !(*share > 0 && *share <= 1) {
		return usageError("--max-share must be above 0 and at most 1")
	}
	if *target < time.Millisecond {
		return usageError("--target-latency must be at least 1ms")
	}
	st, err := openStore(ctx, e, *store)
	if err != nil {
		return err
	}
	defer st.Close()
	// Until a batch comes back short: no bound on batches, each bounded by ctx alone.
	r, err := sweeper.Drain(ctx, st, sweeper.Options{Batch: *batch, MaxShare: *share, TargetLatency: *target,
		Timeout: 24 * time.Hour})
	if err != nil {
		return fmt.Errorf("after deleting %d records: %w", r.Deleted, redactError(err, *store))
	}
	fmt.Fprintf(e.stdout, "deleted %d expired records\n", r.Deleted)
	return nil
}

// inspection is what `idem inspect` prints.
type inspection struct {
	Key          string              `json:"key"`
	Scope        *string             `json:"scope,omitempty"`      // the gateway's scope (an HMAC, or "" for none)
	ClientKey    string              `json:"client_key,omitempty"` // the client's key, for a key made by a gateway
	Condition    string              `json:"condition"`
	State        string              `json:"state"`
	Route        string              `json:"route,omitempty"` // what claimed the key, such as "POST /v1/orders/{id}/pay"
	Expired      bool                `json:"expired"`
	Fingerprint  string              `json:"fingerprint"`
	Token        int64               `json:"token"`
	Attempts     int                 `json:"attempts"`      // times the effect was started, across releases and takeovers
	FirstClaimed string              `json:"first_claimed"` // when the key was first claimed (RFC 3339)
	Age          string              `json:"age"`
	LeaseLeft    string              `json:"lease_left,omitempty"`
	ExpiresIn    string              `json:"expires_in,omitempty"`
	Status       int                 `json:"status,omitempty"`
	BodyBytes    int                 `json:"body_bytes"`
	BodyOmitted  bool                `json:"body_omitted,omitempty"`
	Body         string              `json:"body,omitempty"`
	StoredHeader map[string][]string `json:"headers,omitempty"`
}

func runInspect(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "inspect", "KEY [--scope-value VALUE | --scope none] [--store URL] [--body] [--json]")
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprintln(e.stderr, "\n"+keyHelp+"\n\n"+conditionHelp)
	}
	store := storeFlag(e, fs)
	sc := bindScope(e, fs)
	body := fs.Bool("body", false, "print the stored body too")
	asJSON := fs.Bool("json", false, "print JSON")
	st, rec, err := openRecord(ctx, e, fs, args, store, sc)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now()
	cond := console.ConditionOf(rec, now)
	in := inspection{
		Key: rec.Key, Condition: string(cond), State: rec.State.String(), Expired: rec.Expired(now), Fingerprint: rec.Fingerprint,
		Token: rec.Token, Attempts: console.Starts(rec), FirstClaimed: rec.CreatedAt.UTC().Format(time.RFC3339Nano), Age: now.Sub(rec.CreatedAt).Round(time.Millisecond).String(), Route: rec.Route,
	}
	if scope, client, ok := splitKey(rec.Key); ok {
		in.Scope, in.ClientKey = &scope, client
	}
	if cond != console.Released {
		in.ExpiresIn = rec.ExpiresAt.Sub(now).Round(time.Second).String()
	}
	if cond.Live() {
		in.LeaseLeft = rec.LeaseUntil.Sub(now).Round(time.Millisecond).String()
	}
	if r := rec.Response; r != nil {
		in.Status, in.BodyBytes, in.BodyOmitted, in.StoredHeader = r.Status, len(r.Body), r.BodyOmitted, r.Header
		if *body {
			if utf8.Valid(r.Body) {
				in.Body = string(r.Body)
			} else {
				in.Body = fmt.Sprintf("(%d bytes of binary)", len(r.Body))
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	w := e.stdout
	fmt.Fprintf(w, "key          %s\n", printable(in.Key))
	if in.Scope != nil {
		fmt.Fprintf(w, "scope        %s\nclient key   %s\n", cmp.Or(*in.Scope, "(none)"), printable(in.ClientKey))
	}
	fmt.Fprintf(w, "state        %s\n", console.Explain(cond, rec, now))
	if in.Route != "" {
		fmt.Fprintf(w, "route        %s\n", printable(in.Route))
	}
	fmt.Fprintf(w, "fingerprint  %s\n", in.Fingerprint)
	fmt.Fprintf(w, "token        %d\nattempts     %d\nfirst claim  %s\nage          %s\n", in.Token, in.Attempts, in.FirstClaimed, in.Age)
	if in.LeaseLeft != "" {
		fmt.Fprintf(w, "lease left   %s\n", in.LeaseLeft)
	}
	if in.ExpiresIn != "" {
		fmt.Fprintf(w, "expires in   %s\n", in.ExpiresIn)
	}
	if rec.Response != nil {
		fmt.Fprintf(w, "status       %d\nbody         %d bytes", in.Status, in.BodyBytes)
		if in.BodyOmitted {
			fmt.Fprint(w, " (not retained: over the size limit)")
		}
		fmt.Fprintln(w)
		if *body {
			fmt.Fprintf(w, "\n%s\n", in.Body)
		}
	}
	return nil
}

// releaseResult is what `idem release --json` prints: what the key was and what was done.
type releaseResult struct {
	Key       string `json:"key"`
	Condition string `json:"condition"` // before the release
	Action    string `json:"action"`    // released, deleted, none (already released or expired) or refused
	Token     int64  `json:"token"`
	Message   string `json:"message"`
}

func runRelease(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "release", "KEY [--scope-value VALUE | --scope none] [--store URL] [--force] [--json]")
	store := storeFlag(e, fs)
	sc := bindScope(e, fs)
	force := fs.Bool("force", false, "also release a key whose lease is live (running or held), and delete a completed record")
	asJSON := fs.Bool("json", false, "print the outcome as JSON (also when refused)")
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprintln(e.stderr, "\n"+keyHelp+`

release frees a key whose holder is gone (stale) so its next request executes. It refuses,
unless --force:
  - a running key (its lease is live and renewed): releasing it lets a retry execute while
    the first call still runs, a second effect;
  - a held key (an uncertain outcome kept by --uncertain hold): check first that the effect
    did not happen;
  - a completed key: its next request would execute again. --force deletes the record, but
    a gateway that has it in its replay cache (--cache) goes on replaying it until the
    record's expiry (at most --ttl after it completed), or until that gateway restarts or
    evicts it. Restart the gateways, or run them with --cache -1, when a forced release must
    take effect at once.`)
	}
	st, rec, err := openRecord(ctx, e, fs, args, store, sc)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now()
	cond := console.ConditionOf(rec, now)
	res, err := release(ctx, st, rec, cond, now, *force)
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(res); jerr != nil {
			return jerr
		}
	} else if err == nil {
		fmt.Fprintln(e.stdout, res.Message)
	}
	return err
}

// release acts on rec, whose condition is cond: it releases a stale claim, refuses a live
// lease or a completed record unless force, and deletes a completed record with force. A
// refusal is both in the result (action refused) and the error.
func release(ctx context.Context, st storeurl.Store, rec idem.Record, cond console.Condition, now time.Time, force bool) (releaseResult, error) {
	key := rec.Key
	res := releaseResult{Key: key, Condition: string(cond), Token: rec.Token}
	refuse := func(format string, args ...any) (releaseResult, error) {
		err := fmt.Errorf(format, args...)
		res.Action, res.Message = "refused", err.Error()
		return res, err
	}
	switch {
	case cond == console.Expired || cond == console.Released:
		res.Action, res.Message = "none", fmt.Sprintf("key %q is already %s: nothing to release", key, cond)
		return res, nil
	case cond.Live() && !force:
		return refuse("key %q is %s: %s; refusing to release it without --force, since a retry would then execute while the first may still act (a second effect)",
			key, cond, console.Explain(cond, rec, now))
	case rec.State == idem.StateInProgress:
		if err := st.Release(ctx, key, rec.Token); err != nil {
			if errors.Is(err, idem.ErrLeaseLost) {
				return refuse("key %q changed while releasing it (it completed or was taken over); inspect it again", key)
			}
			return res, err
		}
		res.Action, res.Message = "released", fmt.Sprintf("released %s key %q (token %d): its next request executes", cond, key, rec.Token)
		return res, nil
	case !force:
		return refuse("key %q is completed (status %d): refusing to release it without --force, since its next request would execute again", key, statusOf(rec))
	}
	d, ok := st.(idem.Deleter)
	if !ok {
		return refuse("this store cannot delete completed records")
	}
	if err := d.Delete(ctx, key); err != nil {
		return res, err
	}
	res.Action = "deleted"
	res.Message = fmt.Sprintf("deleted completed key %q: its next request executes again, except at a gateway that still has it in its replay cache (until %s at most)",
		key, rec.ExpiresAt.Format(time.RFC3339))
	return res, nil
}

func statusOf(rec idem.Record) int {
	if rec.Response == nil {
		return 0
	}
	return rec.Response.Status
}
