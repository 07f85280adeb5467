package idem_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

type receipt struct {
	Charge  string            `json:"charge"`
	Amount  int64             `json:"amount"`
	Tags    []string          `json:"tags"`
	Meta    map[string]string `json:"meta"`
	At      time.Time         `json:"at"`
	private string
}

type order struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

func newTypedEngine(t *testing.T, opt idem.Options) *idem.Engine {
	t.Helper()
	eng, err := idem.New(memstore.New(), opt)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// Many goroutines with one key: the function runs once, and every caller gets a result equal
// to the first (which round-trips through JSON).
func TestDoJSONConcurrentOneEffect(t *testing.T) {
	t.Parallel()
	eng := newTypedEngine(t, idem.Options{Wait: 10 * time.Second, PollInterval: time.Millisecond})
	var runs atomic.Int32
	release := make(chan struct{})
	want := receipt{Charge: "ch_1", Amount: 1000, Tags: []string{"a", "b"}, Meta: map[string]string{"k": "v"},
		At: time.Date(2026, 12, 1, 10, 0, 0, 123456789, time.UTC)}
	const n = 50
	var wg sync.WaitGroup
	got := make([]receipt, n)
	replayed := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			got[i], _, errs[i] = func() (receipt, idem.Result, error) {
				v, res, err := idem.DoJSON(context.Background(), eng, "order-1", order{ID: "1", Amount: 1000}, func(context.Context) (receipt, error) {
					runs.Add(1)
					<-release
					return want, nil
				})
				replayed[i] = res.Replayed
				return v, res, err
			}()
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	if r := runs.Load(); r != 1 {
		t.Fatalf("function ran %d times, want 1", r)
	}
	nReplayed := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Fatalf("caller %d got %+v, want %+v", i, got[i], want)
		}
		if replayed[i] {
			nReplayed++
		}
	}
	if nReplayed != n-1 {
		t.Fatalf("%d replays, want %d", nReplayed, n-1)
	}
}

// A replay is decoded from the stored JSON: what JSON carries is equal, what it does not
// (an unexported field) is lost, as documented.
func TestDoJSONReplayIsDecodedJSON(t *testing.T) {
	t.Parallel()
	eng := newTypedEngine(t, idem.Options{})
	first := receipt{Charge: "ch_2", Amount: 5, private: "kept only by the first caller"}
	fn := func(context.Context) (receipt, error) { return first, nil }
	v1, r1, err := idem.DoJSON(context.Background(), eng, "k", order{ID: "2"}, fn)
	if err != nil || !r1.Executed || r1.Replayed || v1.private == "" {
		t.Fatalf("first: %+v %+v %v", v1, r1, err)
	}
	if string(r1.Response.Body) != `{"charge":"ch_2","amount":5,"tags":null,"meta":null,"at":"0001-01-01T00:00:00Z"}` {
		t.Fatalf("stored body %s", r1.Response.Body)
	}
	v2, r2, err := idem.DoJSON(context.Background(), eng, "k", order{ID: "2"}, func(context.Context) (receipt, error) {
		t.Fatal("ran again")
		return receipt{}, nil
	})
	if err != nil || !r2.Replayed || r2.Executed {
		t.Fatalf("second: %+v %v", r2, err)
	}
	first.private = ""
	if !reflect.DeepEqual(v2, first) {
		t.Fatalf("replayed %+v, want %+v", v2, first)
	}
}

func TestDoJSONMismatch(t *testing.T) {
	t.Parallel()
	eng := newTypedEngine(t, idem.Options{})
	ok := func(context.Context) (int, error) { return 1, nil }
	if _, _, err := idem.DoJSON(context.Background(), eng, "k", order{ID: "1", Amount: 10}, ok); err != nil {
		t.Fatal(err)
	}
	v, _, err := idem.DoJSON(context.Background(), eng, "k", order{ID: "1", Amount: 99}, func(context.Context) (int, error) {
		t.Fatal("ran on a mismatch")
		return 2, nil
	})
	if !errors.Is(err, idem.ErrMismatch) || v != 0 {
		t.Fatalf("got %d, %v; want 0, ErrMismatch", v, err)
	}
}

// An error from fn releases the claim (the default policy): the retry runs fn again.
func TestDoJSONErrorReleases(t *testing.T) {
	t.Parallel()
	eng := newTypedEngine(t, idem.Options{})
	boom := errors.New("card declined by a flaky network")
	calls := 0
	fn := func(context.Context) (string, error) {
		calls++
		if calls == 1 {
			return "", boom
		}
		return "ok", nil
	}
	if _, _, err := idem.DoJSON(context.Background(), eng, "k", 1, fn); !errors.Is(err, boom) {
		t.Fatalf("first: %v", err)
	}
	v, res, err := idem.DoJSON(context.Background(), eng, "k", 1, fn)
	if err != nil || v != "ok" || !res.Executed || calls != 2 {
		t.Fatalf("retry: %q %+v %v (calls %d)", v, res, err, calls)
	}
}

// A result JSON cannot encode is not stored, and the function is never run again for the key.
func TestDoJSONResultNotEncodable(t *testing.T) {
	t.Parallel()
	eng := newTypedEngine(t, idem.Options{})
	calls := 0
	fn := func(context.Context) (float64, error) { calls++; return math.NaN(), nil }
	v, res, err := idem.DoJSON(context.Background(), eng, "k", nil, fn)
	if !errors.Is(err, idem.ErrResultNotRetained) || !math.IsNaN(v) || !res.Executed || !res.Kept {
		t.Fatalf("first: %v %+v %v", v, res, err)
	}
	v, res, err = idem.DoJSON(context.Background(), eng, "k", nil, fn)
	if !errors.Is(err, idem.ErrResultNotRetained) || v != 0 || !res.Replayed || calls != 1 {
		t.Fatalf("replay: %v %+v %v (calls %d)", v, res, err, calls)
	}
}

func TestDoJSONBadInputAndStoredType(t *testing.T) {
	t.Parallel()
	eng := newTypedEngine(t, idem.Options{})
	never := func(context.Context) (int, error) { t.Fatal("ran"); return 0, nil }
	if _, _, err := idem.DoJSON(context.Background(), eng, "k", make(chan int), never); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("unencodable input: %v", err)
	}
	if _, _, err := idem.DoJSON[int](context.Background(), eng, "k", 1, nil); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("nil fn: %v", err)
	}
	// A record stored as a string, read back as an int (the type changed between releases).
	if _, _, err := idem.DoJSON(context.Background(), eng, "typed", 1, func(context.Context) (string, error) { return "x", nil }); err != nil {
		t.Fatal(err)
	}
	if _, res, err := idem.DoJSON(context.Background(), eng, "typed", 1, never); !errors.Is(err, idem.ErrCorruptRecord) || !res.Replayed {
		t.Fatalf("changed type: %+v %v", res, err)
	}
}

func TestWrap(t *testing.T) {
	t.Parallel()
	eng := newTypedEngine(t, idem.Options{})
	var calls atomic.Int32
	chargeOrder := func(_ context.Context, o order) (receipt, error) {
		calls.Add(1)
		return receipt{Charge: "ch_" + o.ID, Amount: o.Amount}, nil
	}
	charge := idem.Wrap(eng, "charge", func(o order) string { return o.ID }, chargeOrder)
	refund := idem.Wrap(eng, "refund", func(o order) string { return o.ID }, chargeOrder)
	ctx := context.Background()
	for range 3 {
		r, err := charge(ctx, order{ID: "7", Amount: 70})
		if err != nil || r.Charge != "ch_7" || r.Amount != 70 {
			t.Fatalf("charge: %+v %v", r, err)
		}
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("charge ran %d times, want 1", c)
	}
	// Another function with the same key runs on its own.
	if _, err := refund(ctx, order{ID: "7", Amount: 70}); err != nil || calls.Load() != 2 {
		t.Fatalf("refund: %v, calls %d", err, calls.Load())
	}
	// The same key with another input is a mismatch.
	if _, err := charge(ctx, order{ID: "7", Amount: 71}); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	if _, err := charge(ctx, order{}); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("empty key: %v", err)
	}
	for _, name := range []string{"a|b", "|a", "a|", "", "a\nb", strings.Repeat("n", idem.MaxScopeLen+1)} {
		bad := idem.Wrap(eng, name, func(o order) string { return o.ID }, chargeOrder)
		if _, err := bad(ctx, order{ID: "1"}); !errors.Is(err, idem.ErrInvalidInput) {
			t.Fatalf("name %q: %v", name, err)
		}
	}
	if c := calls.Load(); c != 2 {
		t.Fatalf("calls %d, want 2", c)
	}
}
