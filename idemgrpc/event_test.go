package idemgrpc_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestOnEvent: ServerOptions.OnEvent gets one Event per call, with the outcome in the words
// idemhttp uses for the same thing, the code answered, the caller's key and the method.
func TestOnEvent(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		events []idemgrpc.Event
	)
	b := setup(t, config{server: idemgrpc.ServerOptions{MaxReplyBytes: 64, OnEvent: func(ev idemgrpc.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}}})
	b.svc.set(func(_ context.Context, in *structpb.Struct) (*wrapperspb.StringValue, error) {
		switch in.GetFields()["do"].GetStringValue() {
		case "fail":
			return nil, status.Error(codes.Unavailable, "try later")
		case "cancel":
			return nil, status.Error(codes.DeadlineExceeded, "gave up")
		case "big":
			return wrapperspb.String(strings.Repeat("x", 200)), nil
		}
		return wrapperspb.String("ok"), nil
	})
	ctx := ctxT(t)
	b.call(ctx, "k1", map[string]any{"do": "ok"})
	b.call(ctx, "k1", map[string]any{"do": "ok"})
	b.call(ctx, "k1", map[string]any{"do": "other"})
	b.call(ctx, "k2", map[string]any{"do": "fail"})
	b.call(ctx, "k3", map[string]any{"do": "cancel"})
	b.call(ctx, "k4", map[string]any{"do": "big"})
	b.call(ctx, "", nil)
	b.call(metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, "a"), "b", nil) // the key twice
	b.store.down.Store(true)
	b.call(ctx, "k5", nil)

	want := []struct {
		outcome idemgrpc.Outcome
		code    codes.Code
		key     string
	}{
		{idemgrpc.OutcomeExecuted, codes.OK, "k1"},
		{idemgrpc.OutcomeReplay, codes.OK, "k1"},
		{idemgrpc.OutcomeMismatch, codes.FailedPrecondition, "k1"},
		{idemgrpc.OutcomeReleased, codes.Unavailable, "k2"},
		{idemgrpc.OutcomeUncertain, codes.DeadlineExceeded, "k3"},
		{idemgrpc.OutcomeOversize, codes.OK, "k4"},
		{idemgrpc.OutcomeBypass, codes.OK, ""},
		{idemgrpc.OutcomeInvalidKey, codes.InvalidArgument, ""},
		{idemgrpc.OutcomeStoreError, codes.Unavailable, "k5"},
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(want), events)
	}
	for i, w := range want {
		ev := events[i]
		if ev.Outcome != w.outcome || ev.Code != w.code || ev.Key != w.key || ev.Method != chargeMethod || ev.Start.IsZero() || ev.Duration <= 0 {
			t.Errorf("call %d: %+v, want outcome %s, code %s, key %q", i, ev, w.outcome, w.code, w.key)
		}
	}
	if ev := events[8]; ev.Err == nil || !strings.Contains(ev.Err.Error(), errDown.Error()) {
		t.Errorf("store_error event: err %v, want the store's", ev.Err)
	}
	if ev := events[4]; ev.Err != nil {
		t.Errorf("uncertain event: err %v, want none (the handler's own answer)", ev.Err)
	}
}

// TestOnEventInFlight: a duplicate refused while the first call runs is in_flight.
func TestOnEventInFlight(t *testing.T) {
	t.Parallel()
	evs := make(chan idemgrpc.Event, 2)
	b := setup(t, config{engine: idem.Options{}, server: idemgrpc.ServerOptions{OnEvent: func(ev idemgrpc.Event) { evs <- ev }}})
	started, release := make(chan struct{}), make(chan struct{})
	b.svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		close(started)
		<-release
		return wrapperspb.String("done"), nil
	})
	ctx := ctxT(t)
	done := make(chan reply)
	go func() { done <- b.call(ctx, "k", nil) }()
	<-started
	b.call(ctx, "k", nil)
	if ev := <-evs; ev.Outcome != idemgrpc.OutcomeInFlight || ev.Code != codes.Aborted {
		t.Errorf("duplicate: %+v, want in_flight, Aborted", ev)
	}
	close(release)
	<-done
	if ev := <-evs; ev.Outcome != idemgrpc.OutcomeExecuted {
		t.Errorf("first: %+v, want executed", ev)
	}
}
