package idem_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

func TestCheckKey(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"k", "ключ", strings.Repeat("k", idem.MaxStorageKeyLen)} {
		if err := idem.CheckKey(key); err != nil {
			t.Errorf("CheckKey(%.20q) = %v, want nil", key, err)
		}
	}
	bad := map[string]string{
		"": "empty key",
		strings.Repeat("k", idem.MaxStorageKeyLen+1): "longer than",
		"k\xff": "UTF-8",
		"k\x00": "NUL",
	}
	for key, want := range bad {
		err := idem.CheckKey(key)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckKey(%.20q) = %v, want ErrInvalidInput saying %q", key, err, want)
		}
	}
}

func TestErrClosedFailsClosed(t *testing.T) {
	t.Parallel()
	wrapped := &idem.StoreError{Op: "reserve", Err: idem.ErrClosed}
	if !errors.Is(wrapped, idem.ErrClosed) || !errors.Is(idem.ErrClosed, idem.ErrStoreUnavailable) {
		t.Fatalf("ErrClosed must match itself through a StoreError and ErrStoreUnavailable")
	}
	if errors.Is(idem.ErrStoreUnavailable, idem.ErrClosed) {
		t.Fatalf("ErrStoreUnavailable must not match ErrClosed")
	}
}

// Uncertain keeps the error it marks in the chain and in its text, and matches ErrUncertain;
// with no error it is ErrUncertain's text alone.
func TestUncertainError(t *testing.T) {
	bare := idem.Uncertain(nil)
	if bare.Error() != idem.ErrUncertain.Error() || !errors.Is(bare, idem.ErrUncertain) {
		t.Fatalf("Uncertain(nil) = %q, Is ErrUncertain %t", bare, errors.Is(bare, idem.ErrUncertain))
	}
	cause := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	err := idem.Uncertain(cause)
	if want := "idem: outcome uncertain: " + cause.Error(); err.Error() != want {
		t.Fatalf("Uncertain(err) = %q, want %q", err, want)
	}
	var op *net.OpError
	if !errors.Is(err, idem.ErrUncertain) || !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &op) || op != cause {
		t.Fatalf("Uncertain(err) does not match both ErrUncertain and its cause: %v", err)
	}
}

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
