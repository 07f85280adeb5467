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
	if err := b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, b.base.Add(ttl)); err != nil {
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
