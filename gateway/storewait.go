package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storeurl"
)

// readyKey is the key Ready and the startup check read: no request can have it, since a
// storage key made by the middleware contains the scope separator.
const readyKey = "idem:readyz"

// openStore opens the store named by raw and reads one key from it, so that a store that
// cannot be reached is found at startup, whatever its kind (opening a DynamoDB store makes no
// call; opening the others does). With wait > 0 it tries again, backing off from 250ms to 5s
// and logging each failure, until wait has passed; then, or at once with wait 0, it fails with
// an error wrapping idem.ErrStoreUnavailable that names the store. A bad URL fails at once.
func openStore(ctx context.Context, raw string, wait time.Duration, log *slog.Logger) (storeurl.Store, error) {
	start := time.Now()
	deadline := start.Add(wait)
	backoff := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		st, err := tryStore(ctx, raw, wait > 0, time.Until(deadline))
		if err == nil {
			if attempt > 1 {
				log.Info("store reached", "store", redactedURL(raw), "attempts", attempt, "after", time.Since(start).Round(time.Millisecond))
			}
			return st, nil
		}
		left := time.Until(deadline)
		if wait <= 0 || left <= 0 || ctx.Err() != nil || errors.Is(err, idem.ErrInvalidInput) || errors.Is(err, storeurl.ErrUnknownScheme) {
			return nil, unreachable(raw, attempt, time.Since(start), wait, err)
		}
		sleep := min(backoff, left)
		log.Warn("store unreachable: trying again", "store", redactedURL(raw), "attempt", attempt,
			"retry_in", sleep.Round(time.Millisecond), "gives_up_in", left.Round(time.Second), "err", err)
		t := time.NewTimer(sleep)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, unreachable(raw, attempt, time.Since(start), wait, err)
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// tryStore opens the store and reads readyKey. While waiting (retry), an attempt is bounded by
// what is left of the wait, between 2 and 10 seconds, so that a store that swallows packets
// cannot hold the first attempt past the wait.
func tryStore(ctx context.Context, raw string, retry bool, left time.Duration) (storeurl.Store, error) {
	if retry {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, min(max(left, 2*time.Second), 10*time.Second))
		defer cancel()
	}
	st, err := storeurl.Open(ctx, raw)
	if err != nil {
		return nil, err
	}
	if _, err := st.Get(ctx, readyKey); err != nil && !errors.Is(err, idem.ErrNotFound) {
		st.Close()
		return nil, fmt.Errorf("reading from %s: %w", redactedURL(raw), err)
	}
	return st, nil
}

// unreachable is the error of a store that could not be reached.
func unreachable(raw string, attempts int, took, wait time.Duration, err error) error {
	if !errors.Is(err, idem.ErrStoreUnavailable) && !errors.Is(err, idem.ErrInvalidInput) && !errors.Is(err, storeurl.ErrUnknownScheme) {
		err = fmt.Errorf("%w: %w", idem.ErrStoreUnavailable, err)
	}
	if wait <= 0 {
		return fmt.Errorf("gateway: cannot reach the store %s (wait_for_store, --wait-for-store, waits for it): %w", redactedURL(raw), err)
	}
	return fmt.Errorf("gateway: cannot reach the store %s: tried %d times in %s (wait_for_store %s): %w",
		redactedURL(raw), attempts, took.Round(time.Millisecond), wait, err)
}

// redactedURL is raw without its password and its query (whose parameters may carry
// credentials), for logs and errors.
func redactedURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a store URL that does not parse)"
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, Opaque: u.Opaque}
	if u.User != nil {
		r.User = url.User(u.User.Username())
	}
	return r.String()
}
