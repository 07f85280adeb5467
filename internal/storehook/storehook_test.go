package storehook_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/storehook"
	"github.com/idemkit/idem/store/memstore"
)

// Every operation passes through both hooks with its own name, in order, and reaches the
// store; an error from Before is the call's error and the store is not reached.
func TestHooksSeeEveryOperation(t *testing.T) {
	ctx := context.Background()
	mem := memstore.New()
	var before, after []string
	var failOp storehook.Op = storehook.NumOps
	down := errors.New("down")
	st := storehook.Wrap(mem, storehook.Hooks{
		Before: func(_ context.Context, op storehook.Op) error {
			before = append(before, op.String())
			if op == failOp {
				return down
			}
			return nil
		},
		After: func(op storehook.Op, start time.Time, err error) {
			if start.IsZero() {
				t.Errorf("%s: no start time", op)
			}
			if (op == failOp) != errors.Is(err, down) {
				t.Errorf("%s: err %v", op, err)
			}
			after = append(after, op.String())
		},
	})
	now := time.Now()
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: "fp", Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	tok := res.Record.Token
	if err := st.Extend(ctx, "k", tok, now.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, "k", tok, idem.Response{Status: 201}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Get(ctx, "k"); err != nil || rec.State != idem.StateCompleted {
		t.Fatalf("Get = %+v, %v", rec, err)
	}
	if _, err := st.Sweep(ctx, now, 10); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, "k", tok); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("Release of a completed record = %v, want ErrLeaseLost", err)
	}
	failOp = storehook.Get
	if _, err := st.Get(ctx, "k"); !errors.Is(err, down) {
		t.Fatalf("Get with a failing Before = %v", err)
	}
	want := "[reserve extend complete get sweep release get]"
	if got := fmtList(before); got != want {
		t.Errorf("Before saw %s, want %s", got, want)
	}
	if got := fmtList(after); got != want {
		t.Errorf("After saw %s, want %s", got, want)
	}
	if storehook.NumOps.String() != "unknown" {
		t.Errorf("NumOps.String() = %q", storehook.NumOps.String())
	}
}

func fmtList(s []string) string {
	out := "["
	for i, v := range s {
		if i > 0 {
			out += " "
		}
		out += v
	}
	return out + "]"
}

// A wrapped store keeps the routes an engine names: the claim passes through the hooks as a
// Reserve, with its route.
func TestRoutePassesThrough(t *testing.T) {
	mem := memstore.New()
	var ops []string
	st := storehook.Wrap(mem, storehook.Hooks{Before: func(_ context.Context, op storehook.Op) error {
		ops = append(ops, op.String())
		return nil
	}})
	eng, err := idem.New(st, idem.Options{Heartbeat: -1})
	if err != nil {
		t.Fatal(err)
	}
	call := idem.Call{Key: "k", Fingerprint: idem.Fingerprint(nil), Route: "POST /v1/orders"}
	if _, err := eng.Run(context.Background(), call, func(context.Context) (idem.Response, error) {
		return idem.Response{Status: 201}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if rec, err := mem.Get(context.Background(), "k"); err != nil || rec.Route != "POST /v1/orders" {
		t.Fatalf("record = %+v, %v; want the route", rec, err)
	}
	if len(ops) == 0 || ops[0] != "reserve" {
		t.Fatalf("operations seen: %v, want reserve first", ops)
	}
}
