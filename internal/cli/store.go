package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storeurl"
)

const defaultStore = "sqlite://./idem.db"

// storeFlag adds --store with its env var and default.
func storeFlag(e *env, fs interface {
	StringVar(*string, string, string, string)
}) *string {
	var s string
	def := defaultStore
	if v := e.getenv("IDEM_STORE"); v != "" {
		def = v
	}
	fs.StringVar(&s, "store", def, "store URL (env IDEM_STORE): "+storeSchemes())
	return &s
}

// storeSchemes names the schemes a store URL may have, as storeurl registers them
// ("dynamodb://, memory://, …"), leaving out those in except.
func storeSchemes(except ...string) string {
	var names []string
	for _, s := range storeurl.Schemes() {
		if !slices.Contains(except, s) {
			names = append(names, s+"://")
		}
	}
	return strings.Join(names, ", ")
}

// openStore opens the existing store at raw for a command that reports its own failure: the
// store clients' own lines (go-redis retrying a dial, say) go to stderr only at level error,
// so a store that is down gives one line, the command's, and not one per attempt.
func openStore(ctx context.Context, e *env, raw string) (storeurl.Store, error) {
	return openStoreLogging(ctx, raw, newLogger(e.stderr, "text", "error"))
}

// openStoreLogging opens the existing store at raw with the store clients' lines going to
// log. It creates and migrates nothing (storeurl.OpenExisting): a command that reads or
// repairs records must not make a table where it was pointed at the wrong one, and then
// answer "no record" as if the key had never been claimed. A missing table is an error
// matching storeurl.ErrNoTable.
func openStoreLogging(ctx context.Context, raw string, log *slog.Logger) (storeurl.Store, error) {
	storeurl.SetLogger(log)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := storeurl.OpenExisting(ctx, raw)
	if errors.Is(err, storeurl.ErrNoTable) {
		err = fmt.Errorf("%w; nothing was created: check the store URL's path, table and schema, or create the table with idem migrate", err)
	}
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
