// Package storetest is the conformance suite for idem.Store implementations.
//
// Every backend passes it unchanged: its test is a constructor and a call.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) idem.Store { return newIsolatedStore(t) })
//	}
//
// The constructor is called once per subtest and must return a store that shares nothing with
// the others (its own table, schema or key prefix), so subtests run in parallel. It registers
// its own cleanup with t.Cleanup.
//
// # What it checks
//
// Concurrent claims of one key (exactly one wins, repeated), takeover only after the lease ran
// out and only with the same fingerprint, fencing of Complete, Release and Extend, expired
// records counting as absent, Sweep deleting only expired records in bounded batches, exact
// round trips of empty, binary and large bodies, long and unicode keys and multi-valued headers,
// cancelled contexts, Complete racing a takeover, a closed store failing cleanly, and a
// porcupine check that concurrent histories of all operations are linearizable with respect
// to the contract (see CheckLinearizable).
package storetest

import (
	"errors"
	"testing"

	"github.com/idemkit/idem"
)

func (s suite) delete(t *testing.T, b *bundle) {
	d, ok := b.store.(idem.Deleter)
	if !ok {
		t.Skip("storetest: store does not implement idem.Deleter; Delete test skipped")
	}
	c := ctx(t)
	k := b.key("delete")
	claim := mustClaim(t, b.store, k, fpA, b.base)
	if err := b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, b.base.Add(window)); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(c, k); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := b.store.Get(c, k); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := d.Delete(c, k); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	if res := mustReserve(t, b.store, k, fpB, b.base); !res.Claimed {
		t.Fatal("a deleted key cannot be claimed again")
	}
}
