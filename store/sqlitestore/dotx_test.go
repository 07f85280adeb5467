package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
)

// DoTx with the caller's own typed transaction: executed, replayed, mismatched, rolled back.
func TestDoTx(t *testing.T) {
	t.Parallel()
	st := open(t, sqlitestore.Options{})
	ctx := context.Background()
	d, err := sql.Open("sqlite", st.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.ExecContext(ctx, "CREATE TABLE orders (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		t.Helper()
		if err := d.QueryRowContext(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	boom := errors.New("declined")
	place := func(fail bool) sqlitestore.TxFunc {
		return func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			if _, err := tx.ExecContext(ctx, "INSERT INTO orders (amount) VALUES (4200)"); err != nil {
				return idem.Response{}, err
			}
			if fail {
				return idem.Response{}, boom
			}
			return idem.Response{Status: 201, Body: []byte("placed")}, nil
		}
	}
	fp := idem.Fingerprint([]byte("a"))
	if _, err := st.DoTx(ctx, "k", fp, place(true)); !errors.Is(err, boom) {
		t.Fatalf("failing function: %v, want its error", err)
	}
	if _, err := st.Get(ctx, "k"); !errors.Is(err, idem.ErrNotFound) || count() != 0 {
		t.Fatalf("after a rollback: record %v, %d rows; want neither", err, count())
	}
	r, err := st.DoTx(ctx, "k", fp, place(false))
	if err != nil || r.Replayed || !r.Kept || r.Response.Status != 201 {
		t.Fatalf("first: %+v %v", r, err)
	}
	r, err = st.DoTx(ctx, "k", fp, place(false))
	if err != nil || !r.Replayed || string(r.Response.Body) != "placed" {
		t.Fatalf("replay: %+v %v", r, err)
	}
	if _, err := st.DoTx(ctx, "k", idem.Fingerprint([]byte("b")), place(false)); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("other fingerprint: %v, want ErrMismatch", err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d order rows, want 1", n)
	}
	if _, err := st.DoTx(ctx, "k", fp, nil); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("nil function: %v", err)
	}
}

// A Store that has not seen a key existing claims it without looking first; the claim finds a
// record written by another Store on the same file all the same: a replay, a mismatch, an
// engine's claim in flight. With KnownKeys disabled, every call looks first: the same answers.
func TestDoTxUnknownKey(t *testing.T) {
	t.Parallel()
	for _, known := range []int{0, -1} {
		first := open(t, sqlitestore.Options{})
		ctx := context.Background()
		fp := idem.Fingerprint([]byte("a"))
		ran := 0
		fn := func(context.Context, *sql.Tx) (idem.Response, error) {
			ran++
			return idem.Response{Status: 201, Body: []byte("placed")}, nil
		}
		if _, err := first.DoTx(ctx, "done", fp, fn); err != nil {
			t.Fatal(err)
		}
		if _, err := first.Reserve(ctx, idem.ReserveRequest{Key: "held", Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		other, err := sqlitestore.Open(ctx, first.Path(), sqlitestore.Options{KnownKeys: known})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = other.Close() })
		for range 2 { // unknown, then known to other
			r, err := other.DoTx(ctx, "done", fp, fn)
			if err != nil || !r.Replayed || string(r.Response.Body) != "placed" {
				t.Fatalf("KnownKeys %d: replay: %+v %v", known, r, err)
			}
			if _, err := other.DoTx(ctx, "done", idem.Fingerprint([]byte("b")), fn); !errors.Is(err, idem.ErrMismatch) {
				t.Fatalf("KnownKeys %d: other fingerprint: %v, want ErrMismatch", known, err)
			}
			if _, err := other.DoTx(ctx, "held", fp, fn); !errors.Is(err, idem.ErrInFlight) {
				t.Fatalf("KnownKeys %d: held by an engine: %v, want ErrInFlight", known, err)
			}
		}
		if ran != 1 {
			t.Fatalf("KnownKeys %d: the function ran %d times, want once", known, ran)
		}
	}
}
