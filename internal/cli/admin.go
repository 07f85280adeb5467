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
	register("inspect", "show the record of a key", runInspect)
	register("release", "free a stuck in-progress key", runRelease)
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
	if err := parse(fs, args); err != nil {
		return nil, idem.Record{}, err
	}
	if fs.NArg() != 1 {
		return nil, idem.Record{}, usageError("want exactly one KEY (the storage key, as logged by the gateway)")
	}
	st, err := openStore(ctx, *store)
	if err != nil {
		return nil, idem.Record{}, err
	}
	key := fs.Arg(0)
	rec, err := st.Get(ctx, key)
	if err != nil {
		st.Close()
		if errors.Is(err, idem.ErrNotFound) {
			return nil, idem.Record{}, fmt.Errorf("no record for key %q", key)
		}
		return nil, idem.Record{}, redactError(err, *store)
	}
	return st, rec, nil
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
	State        string              `json:"state"`
	Expired      bool                `json:"expired"`
	Fingerprint  string              `json:"fingerprint"`
	Token        int64               `json:"token"`
	Attempts     int                 `json:"attempts"`
	Age          string              `json:"age"`
	LeaseLeft    string              `json:"lease_left,omitempty"`
	ExpiresIn    string              `json:"expires_in"`
	Status       int                 `json:"status,omitempty"`
	BodyBytes    int                 `json:"body_bytes"`
	BodyOmitted  bool                `json:"body_omitted,omitempty"`
	Body         string              `json:"body,omitempty"`
	StoredHeader map[string][]string `json:"headers,omitempty"`
}

func runInspect(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "inspect", "[--store URL] [--body] [--json] KEY")
	store := storeFlag(e, fs)
	body := fs.Bool("body", false, "print the stored body too")
	asJSON := fs.Bool("json", false, "print JSON")
	st, rec, err := openRecord(ctx, fs, args, store)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now()
	in := inspection{
		Key: rec.Key, State: rec.State.String(), Expired: rec.Expired(now), Fingerprint: rec.Fingerprint,
		Token: rec.Token, Attempts: rec.Attempts, Age: now.Sub(rec.CreatedAt).Round(time.Millisecond).String(),
		ExpiresIn: rec.ExpiresAt.Sub(now).Round(time.Second).String(),
	}
	if rec.State == idem.StateInProgress {
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
	state := in.State
	if in.Expired {
		state += " (expired: counts as absent)"
	}
	fmt.Fprintf(w, "state        %s\n", state)
	fmt.Fprintf(w, "fingerprint  %s\n", in.Fingerprint)
	fmt.Fprintf(w, "token        %d\nattempts     %d\nage          %s\n", in.Token, in.Attempts, in.Age)
	if in.LeaseLeft != "" {
		fmt.Fprintf(w, "lease left   %s\n", in.LeaseLeft)
	}
	fmt.Fprintf(w, "expires in   %s\n", in.ExpiresIn)
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
	fs := newFlags(e, "release", "[--store URL] [--force] KEY")
	store := storeFlag(e, fs)
	force := fs.Bool("force", false, "also delete a completed record (its next request executes again)")
	st, rec, err := openRecord(ctx, fs, args, store)
	if err != nil {
		return err
	}
	defer st.Close()
	key := rec.Key
	switch {
	case rec.Expired(time.Now()):
		fmt.Fprintf(e.stdout, "key %q is already expired: nothing to release\n", key)
		return nil
	case rec.State == idem.StateInProgress:
		if err := st.Release(ctx, key, rec.Token); err != nil {
			if errors.Is(err, idem.ErrLeaseLost) {
				return fmt.Errorf("key %q changed while releasing it (it completed or was taken over); inspect it again", key)
			}
			return err
		}
		fmt.Fprintf(e.stdout, "released in-progress key %q (token %d): its next request executes\n", key, rec.Token)
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
	fmt.Fprintf(e.stdout, "deleted completed key %q: its next request executes again\n", key)
	return nil
}

func statusOf(rec idem.Record) int {
	if rec.Response == nil {
		return 0
	}
	return rec.Response.Status
}
