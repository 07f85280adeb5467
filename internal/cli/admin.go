package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
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

func openStore(ctx context.Context, raw string) (storeurl.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := storeurl.Open(ctx, raw)
	return st, redactError(err, raw)
}

// openRecord parses a subcommand's flags and its one KEY argument, opens the store and reads
// the key's record. On success the caller closes the store.
func openRecord(ctx context.Context, fs *flag.FlagSet, args []string, store *string) (storeurl.Store, idem.Record, error) {
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return nil, idem.Record{}, err
	}
	if len(pos) != 1 {
		return nil, idem.Record{}, usageError("want exactly one KEY (the storage key: SCOPE|KEY, where SCOPE is empty with --scope none)")
	}
	st, err := openStore(ctx, *store)
	if err != nil {
		return nil, idem.Record{}, err
	}
	key := pos[0]
	rec, err := st.Get(ctx, key)
	if err != nil {
		st.Close()
		if errors.Is(err, idem.ErrNotFound) {
			return nil, idem.Record{}, fmt.Errorf("no record for key %q: never claimed, or released or expired and deleted since", key)
		}
		return nil, idem.Record{}, redactError(err, *store)
	}
	return st, rec, nil
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

// condition names what a record means now, for an operator: what inspect shows and release
// decides on.
type condition string

const (
	condCompleted condition = "completed" // the stored response is replayed to retries
	condRunning   condition = "running"   // in progress, its lease live and renewed by its holder
	condHeld      condition = "held"      // in progress, its lease reaching the record's expiry
	condStale     condition = "stale"     // in progress, its lease run out: the next retry takes over
	condReleased  condition = "released"  // released: the next request executes
	condExpired   condition = "expired"   // past its expiry: counts as absent
)

// conditionOf classifies rec at now. A released claim keeps its record in some stores, with
// its expiry set before its creation (0); the hold policy for uncertain outcomes extends the
// lease to the record's expiry, which a running call's renewals do not reach unless the TTL
// is as short as the call is long.
func conditionOf(rec idem.Record, now time.Time) condition {
	switch {
	case rec.State == idem.StateInProgress && !rec.ExpiresAt.After(rec.CreatedAt):
		return condReleased
	case rec.Expired(now):
		return condExpired
	case rec.State == idem.StateCompleted:
		return condCompleted
	case !rec.LeaseUntil.After(now):
		return condStale
	case !rec.LeaseUntil.Before(rec.ExpiresAt):
		return condHeld
	}
	return condRunning
}

// explain says what a condition means for the next request with the key.
func explain(c condition, rec idem.Record, now time.Time) string {
	left := rec.LeaseUntil.Sub(now).Round(time.Second)
	switch c {
	case condRunning:
		return fmt.Sprintf("running: its holder renews its lease (%s left); retries get 409 until it finishes", left)
	case condHeld:
		return fmt.Sprintf("held: the outcome was uncertain and is kept until expiry (%s), or a call that long is still running; retries get 409", left)
	case condStale:
		return fmt.Sprintf("stale: its lease ran out %s ago (holder gone, or an uncertain outcome left to expire); the next retry takes over", (-left))
	case condReleased:
		return "released: the next request with this key executes"
	case condExpired:
		return "expired: counts as absent; the next request with this key executes"
	}
	return "completed: retries get the stored response"
}

func runMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "migrate", "[--store URL]")
	store := storeFlag(e, fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	st, err := openStore(ctx, *store)
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
	fs := newFlags(e, "sweep", "[--store URL] [--batch N]")
	store := storeFlag(e, fs)
	batch := fs.Int("batch", 1000, "records deleted per statement")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *batch < 1 {
		return usageError("--batch must be at least 1")
	}
	st, err := openStore(ctx, *store)
	if err != nil {
		return err
	}
	defer st.Close()
	// Until a batch comes back short: no bound on batches, none on a batch but ctx's.
	total, err := sweeper.Sweep(ctx, st, time.Now(), *batch, math.MaxInt, 0)
	if err != nil {
		return fmt.Errorf("after deleting %d records: %w", total, err)
	}
	fmt.Fprintf(e.stdout, "deleted %d expired records\n", total)
	return nil
}

// inspection is what `idem inspect` prints.
type inspection struct {
	Key          string              `json:"key"`
	Condition    string              `json:"condition"`
	State        string              `json:"state"`
	Expired      bool                `json:"expired"`
	Fingerprint  string              `json:"fingerprint"`
	Token        int64               `json:"token"`
	Attempts     int                 `json:"attempts"`
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
	fs := newFlags(e, "inspect", "KEY [--store URL] [--body] [--json]")
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprintln(e.stderr, "\nKEY is the storage key, SCOPE|KEY. The condition shown is one of: running (lease live,\n"+
			"renewed by its holder), held (an uncertain outcome kept until expiry), stale (lease ran\n"+
			"out: the next retry takes over), released, completed, expired (counts as absent).")
	}
	store := storeFlag(e, fs)
	body := fs.Bool("body", false, "print the stored body too")
	asJSON := fs.Bool("json", false, "print JSON")
	st, rec, err := openRecord(ctx, fs, args, store)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now()
	cond := conditionOf(rec, now)
	in := inspection{
		Key: rec.Key, Condition: string(cond), State: rec.State.String(), Expired: rec.Expired(now), Fingerprint: rec.Fingerprint,
		Token: rec.Token, Attempts: rec.Attempts, Age: now.Sub(rec.CreatedAt).Round(time.Millisecond).String(),
	}
	if cond != condReleased {
		in.ExpiresIn = rec.ExpiresAt.Sub(now).Round(time.Second).String()
	}
	if cond == condRunning || cond == condHeld {
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
	fmt.Fprintf(w, "key          %s\n", in.Key)
	fmt.Fprintf(w, "state        %s\n", explain(cond, rec, now))
	fmt.Fprintf(w, "fingerprint  %s\n", in.Fingerprint)
	fmt.Fprintf(w, "token        %d\nattempts     %d\nage          %s\n", in.Token, in.Attempts, in.Age)
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

func runRelease(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "release", "KEY [--store URL] [--force]")
	store := storeFlag(e, fs)
	force := fs.Bool("force", false, "also release a key whose lease is live (running or held), and delete a completed record")
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprintln(e.stderr, `
KEY is the storage key, SCOPE|KEY. release frees a key whose holder is gone (stale) so its
next request executes. It refuses, unless --force:
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
	st, rec, err := openRecord(ctx, fs, args, store)
	if err != nil {
		return err
	}
	defer st.Close()
	key := rec.Key
	now := time.Now()
	switch cond := conditionOf(rec, now); {
	case cond == condExpired || cond == condReleased:
		fmt.Fprintf(e.stdout, "key %q is already %s: nothing to release\n", key, cond)
		return nil
	case (cond == condRunning || cond == condHeld) && !*force:
		return fmt.Errorf("key %q is %s: %s; refusing to release it without --force, since a retry would then execute while the first may still act (a second effect)",
			key, cond, explain(cond, rec, now))
	case rec.State == idem.StateInProgress:
		if err := st.Release(ctx, key, rec.Token); err != nil {
			if errors.Is(err, idem.ErrLeaseLost) {
				return fmt.Errorf("key %q changed while releasing it (it completed or was taken over); inspect it again", key)
			}
			return err
		}
		fmt.Fprintf(e.stdout, "released %s key %q (token %d): its next request executes\n", cond, key, rec.Token)
		return nil
	case !*force:
		return fmt.Errorf("key %q is completed (status %d): refusing to release it without --force, since its next request would execute again", key, statusOf(rec))
	}
	d, ok := st.(idem.Deleter)
	if !ok {
		return fmt.Errorf("this store cannot delete completed records")
	}
	if err := d.Delete(ctx, key); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "deleted completed key %q: its next request executes again, except at a gateway that still has it in its replay cache (until %s at most)\n",
		key, rec.ExpiresAt.Format(time.RFC3339))
	return nil
}

func statusOf(rec idem.Record) int {
	if rec.Response == nil {
		return 0
	}
	return rec.Response.Status
}
