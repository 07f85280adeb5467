package memstore_test

import (
	"context"
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
