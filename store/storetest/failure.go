package storetest

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func (s suite) cancelledContext(t *testing.T, b *bundle) {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	k := b.key("cancelled")
	start := time.Now()
	if _, err := b.store.Reserve(c, idem.ReserveRequest{Key: k, Fingerprint: fpA, Now: b.base, Lease: lease, TTL: ttl}); err == nil {
		t.Error("Reserve with a cancelled context succeeded")
	}
	if _, err := b.store.Get(c, k); err == nil {
		t.Error("Get with a cancelled context succeeded")
	}
	if _, err := b.store.Sweep(c, b.base, 10); err == nil {
		t.Error("Sweep with a cancelled context succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancelled calls took %v", d)
	}
	if _, err := b.store.Get(ctx(t), k); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("after cancelled Reserve, Get: %v, want ErrNotFound (no half-written record)", err)
	}
	claim := mustClaim(t, b.store, k, fpA, b.base)
	if err := b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, b.base.Add(ttl)); err == nil {
		t.Error("Complete with a cancelled context succeeded")
	}
	if err := b.store.Release(c, k, claim.Token); err == nil {
		t.Error("Release with a cancelled context succeeded")
	}
	if err := b.store.Extend(c, k, claim.Token, b.base.Add(ttl)); err == nil {
		t.Error("Extend with a cancelled context succeeded")
	}
	checkSame(t, "record after cancelled calls", mustGet(t, b.store, k), claim)

	// A deadline that runs out mid-call returns promptly too.
	short, cancel2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel2()
	time.Sleep(2 * time.Millisecond)
	start = time.Now()
	_, _ = b.store.Reserve(short, idem.ReserveRequest{Key: b.key("deadline"), Fingerprint: fpA, Now: b.base, Lease: lease, TTL: ttl})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Reserve past its deadline took %v", d)
	}
}

func (s suite) closed(t *testing.T, b *bundle) {
	if s.opt.SkipClose {
		t.Skip("storetest: closed-store test skipped by the backend's Options.SkipClose")
	}
	cl, ok := b.store.(io.Closer)
	if !ok {
		t.Skip("storetest: store has no Close method; closed-store test skipped")
	}
	k := b.key("closed")
	claim := mustClaim(t, b.store, k, fpA, b.base)
	if err := cl.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c := ctx(t)
	closed := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, idem.ErrClosed) || !errors.Is(err, idem.ErrStoreUnavailable) {
			t.Errorf("%s on a closed store: %v, want idem.ErrClosed (idem.ErrStoreUnavailable)", op, err)
		}
	}
	_, err := b.store.Reserve(c, idem.ReserveRequest{Key: b.key("after-close"), Fingerprint: fpA, Now: b.base, Lease: lease, TTL: ttl})
	closed("Reserve", err)
	closed("Complete", b.store.Complete(c, k, claim.Token, idem.Response{Status: 200}, b.base, b.base.Add(ttl)))
	closed("Extend", b.store.Extend(c, k, claim.Token, b.base.Add(ttl)))
	closed("Release", b.store.Release(c, k, claim.Token))
	_, err = b.store.Get(c, k)
	closed("Get", err)
	_, err = b.store.Sweep(c, b.base, 10)
	closed("Sweep", err)
	_ = cl.Close() // a second Close must not panic
}
