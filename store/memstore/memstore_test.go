package memstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idem.Store { return memstore.New() })
}

// Fingerprints of any form (a direct Store user may pass one that is not hex SHA-256) are kept
// as given and compared exactly.
func TestFingerprintForms(t *testing.T) {
	ctx := context.Background()
	st := memstore.New()
	now := time.Now()
	hexFP := idem.Fingerprint([]byte("x"))
	for _, fp := range []string{"", "not-hex", strings.ToUpper(hexFP), hexFP, hexFP[:63] + "g"} {
		key := "k-" + fp
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Minute})
		if err != nil || !res.Claimed || res.Record.Fingerprint != fp {
			t.Fatalf("Reserve(%q) = %+v, %v", fp, res, err)
		}
		// The lease ran out: the same fingerprint takes over, any other does not.
		later := now.Add(2 * time.Second)
		other, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp + "0", Now: later, Lease: time.Second, TTL: time.Minute})
		if err != nil || other.Claimed || other.Record.Fingerprint != fp {
			t.Fatalf("Reserve(%q) with another fingerprint = %+v, %v", fp, other, err)
		}
		same, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: later, Lease: time.Second, TTL: time.Minute})
		if err != nil || !same.Claimed || !same.Takeover {
			t.Fatalf("Reserve(%q) again after the lease = %+v, %v", fp, same, err)
		}
		got, err := st.Get(ctx, key)
		if err != nil || got.Fingerprint != fp || got.Attempts != 2 {
			t.Fatalf("Get(%q) = %+v, %v", key, got, err)
		}
	}
}

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
