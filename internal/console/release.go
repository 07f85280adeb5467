package console

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// ErrRefused reports a release the rules refuse: a live lease or a completed record without
// force, or a record that changed since the operator confirmed.
var ErrRefused = errors.New("console: release refused")

// Release frees key as `idem release` does, with the same rules: a released or expired record
// is left alone; a running or held key (its lease live) is refused unless force, since a retry
// would then execute while the first call may still act; a stale claim is released, fenced on
// its token; a completed record is deleted only with force (its next request executes again).
//
// token is the claim the operator confirmed, as shown: a record whose token has changed since
// (completed, taken over, claimed again) is refused, and so is a token of 0 or less (no claim
// was shown), so a confirmation never applies to another claim than the one shown. It returns what was done, for the operator.
func Release(ctx context.Context, st idem.Store, key string, token int64, force bool, now time.Time) (string, error) {
	rec, err := st.Get(ctx, key)
	if errors.Is(err, idem.ErrNotFound) {
		return "no record: never claimed, or released or expired and deleted since; nothing to release", nil
	}
	if err != nil {
		return "", err
	}
	if token <= 0 {
		return "", fmt.Errorf("%w: no claim was confirmed (token %d): open the record and confirm the claim shown", ErrRefused, token)
	}
	if rec.Token != token {
		return "", fmt.Errorf("%w: the record changed since it was shown (token %d, now %d); look at it again", ErrRefused, token, rec.Token)
	}
	switch cond := ConditionOf(rec, now); {
	case cond == Expired || cond == Released:
		return fmt.Sprintf("already %s: nothing to release", cond), nil
	case cond.Live() && !force:
		return "", fmt.Errorf("%w: %s; releasing it without force would let a retry execute while the first call may still act (a second effect)",
			ErrRefused, Explain(cond, rec, now))
	case rec.State == idem.StateInProgress:
		if err := st.Release(ctx, key, rec.Token); err != nil {
			if errors.Is(err, idem.ErrLeaseLost) {
				return "", fmt.Errorf("%w: the key changed while releasing it (it completed or was taken over); look at it again", ErrRefused)
			}
			return "", err
		}
		return fmt.Sprintf("released the %s claim (token %d): the next request with this key executes", cond, rec.Token), nil
	case !force:
		return "", fmt.Errorf("%w: the record is completed (status %d): its next request would execute again; force deletes it", ErrRefused, statusOf(rec))
	}
	d, ok := st.(idem.Deleter)
	if !ok {
		return "", fmt.Errorf("%w: this store cannot delete completed records", ErrRefused)
	}
	if err := d.Delete(ctx, key); err != nil {
		return "", err
	}
	return fmt.Sprintf("deleted the completed record: its next request executes again, except at a gateway that still has it in its replay cache (until %s at most)",
		rec.ExpiresAt.UTC().Format(time.RFC3339)), nil
}

func statusOf(rec idem.Record) int {
	if rec.Response == nil {
		return 0
	}
	return rec.Response.Status
}
