package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// A lease runs out at its LeaseUntil instant exactly, as idem.Record.LeaseExpired says: a
// Reserve one microsecond before it sees the claim, one at it takes the claim over.
func TestLeaseExpiresAtItsInstant(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	fp := idem.Fingerprint([]byte("x"))
	first, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Minute})
	if err != nil || !first.Claimed {
		t.Fatalf("Reserve = %+v, %v", first, err)
	}
	until := first.Record.LeaseUntil
	if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: until.Add(-time.Microsecond), Lease: time.Second, TTL: time.Minute}); err != nil || res.Claimed {
		t.Fatalf("one microsecond before the lease ran out: %+v, %v (want the live claim)", res, err)
	}
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: until, Lease: time.Second, TTL: time.Minute})
	if err != nil || !res.Claimed || !res.Takeover || res.Record.Token <= first.Record.Token {
		t.Fatalf("at the instant the lease ran out: %+v, %v (want a takeover with a newer token)", res, err)
	}
}

// Another payload under a key whose holder's lease ran out gets the existing record, never the
// claim: a takeover is for the same request only.
func TestNoTakeoverWithAnotherFingerprint(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	now := time.Now()
	first, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: idem.Fingerprint([]byte("a")), Now: now, Lease: time.Second, TTL: time.Minute})
	if err != nil || !first.Claimed {
		t.Fatalf("Reserve = %+v, %v", first, err)
	}
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: idem.Fingerprint([]byte("b")), Now: now.Add(2 * time.Second), Lease: time.Second, TTL: time.Minute})
	if err != nil || res.Claimed || res.Record.Token != first.Record.Token {
		t.Fatalf("another payload after the lease: %+v, %v (want the existing record)", res, err)
	}
}

// A closed store fails every call with an error matching idem.ErrStoreUnavailable, so callers
// fail closed.
func TestClosedIsUnavailable(t *testing.T) {
	st := memstore.New()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	_, err := st.Reserve(context.Background(), idem.ReserveRequest{Key: "k", Fingerprint: idem.Fingerprint(nil), Now: time.Now(), Lease: time.Second, TTL: time.Minute})
	if !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("Reserve on a closed store: %v, want ErrStoreUnavailable", err)
	}
}
