package idem_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// wrappingStore fails every Reserve with a *idem.StoreError, as the network stores do.
type wrappingStore struct{ *memstore.Store }

func (wrappingStore) Reserve(context.Context, idem.ReserveRequest) (idem.Reservation, error) {
	return idem.Reservation{}, &idem.StoreError{Op: "reserve", Err: errors.New("redisstore: connection refused")}
}

// TestStoreErrorNotWrappedTwice checks that a store's own *StoreError reaches the caller as it
// is, still matching ErrStoreUnavailable, and that a plain store error is wrapped once.
func TestStoreErrorNotWrappedTwice(t *testing.T) {
	t.Parallel()
	fn := func(context.Context) (idem.Response, error) {
		t.Error("effect ran although the store failed")
		return idem.Response{}, nil
	}
	fp := idem.Fingerprint([]byte("x"))
	eng, err := idem.New(wrappingStore{memstore.New()}, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = eng.Do(context.Background(), "k", fp, fn)
	if !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("err %v, want ErrStoreUnavailable", err)
	}
	if n := strings.Count(err.Error(), "idem: store"); n != 1 {
		t.Errorf("message %q says \"idem: store\" %d times, want once", err, n)
	}

	closed := memstore.New()
	closed.Close()
	eng, _ = idem.New(closed, idem.Options{})
	_, err = eng.Do(context.Background(), "k", fp, fn)
	var se *idem.StoreError
	if !errors.As(err, &se) || se.Op != "reserve" || !errors.Is(err, idem.ErrClosed) {
		t.Errorf("closed store: err %v, want a reserve *StoreError matching ErrClosed", err)
	}
}
