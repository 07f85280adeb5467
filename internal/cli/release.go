package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/store/storeurl"
)

func init() {
	register("release", "free a key whose holder is gone (refused while its lease is live, unless --force)", runRelease)
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
