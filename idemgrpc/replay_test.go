package idemgrpc_test

import (
	"context"
	"testing"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem/idemgrpc"
)

// TestReplayKeepsHeaderWithoutTrailer: header metadata a handler set, without any trailer,
// is stored and sent again with the replay.
func TestReplayKeepsHeaderWithoutTrailer(t *testing.T) {
	t.Parallel()
	b := setup(t, config{})
	b.svc.set(func(ctx context.Context, _ *structpb.Struct) (*wrapperspb.StringValue, error) {
		_ = grpc.SetHeader(ctx, metadata.Pairs("x-charge-id", "ch_7"))
		return wrapperspb.String("ok"), nil
	})
	ctx := ctxT(t)
	first := b.call(ctx, "k-header", map[string]any{"amount": 7})
	second := b.call(ctx, "k-header", map[string]any{"amount": 7})
	if first.err != nil || second.err != nil || !second.replayed() {
		t.Fatalf("first %s, second %s; want the second replayed", describe(first), describe(second))
	}
	if got := second.header.Get("x-charge-id"); len(got) != 1 || got[0] != "ch_7" {
		t.Fatalf("replayed header x-charge-id %q, want [ch_7]", got)
	}
}

// TestReplyOfExactlyMaxReplyBytesKept: a reply whose stored status is exactly MaxReplyBytes
// long is kept and replayed; one byte over, it is not retained (AlreadyExists,
// ReasonNotRetained).
func TestReplyOfExactlyMaxReplyBytesKept(t *testing.T) {
	t.Parallel()
	a, err := anypb.New(wrapperspb.String("ok")) // the reply of the default handler
	if err != nil {
		t.Fatal(err)
	}
	stored, err := proto.Marshal(&spb.Status{Details: []*anypb.Any{a}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		max  int
		kept bool
	}{{len(stored), true}, {len(stored) - 1, false}} {
		b := setup(t, config{server: idemgrpc.ServerOptions{MaxReplyBytes: tc.max}})
		ctx := ctxT(t)
		first := b.call(ctx, "k-size", map[string]any{"amount": 1})
		second := b.call(ctx, "k-size", map[string]any{"amount": 1})
		if first.err != nil {
			t.Fatalf("MaxReplyBytes %d: first call %s", tc.max, describe(first))
		}
		if tc.kept && (second.err != nil || !second.replayed() || second.msg.GetValue() != "ok") {
			t.Errorf("MaxReplyBytes %d (the stored size): second call %s, want the reply replayed", tc.max, describe(second))
		}
		if !tc.kept && (status.Code(second.err) != codes.AlreadyExists || reason(second.err) != idemgrpc.ReasonNotRetained) {
			t.Errorf("MaxReplyBytes %d (one less): second call %s, want AlreadyExists, %s", tc.max, describe(second), idemgrpc.ReasonNotRetained)
		}
	}
}

// TestReplayKeepsTrailerWithoutHeader: trailer metadata a handler set, without any header,
// is stored and sent again with the replay.
func TestReplayKeepsTrailerWithoutHeader(t *testing.T) {
	t.Parallel()
	b := setup(t, config{})
	b.svc.set(func(ctx context.Context, _ *structpb.Struct) (*wrapperspb.StringValue, error) {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("x-ledger", "entry-3"))
		return wrapperspb.String("ok"), nil
	})
	ctx := ctxT(t)
	first := b.call(ctx, "k-trailer", map[string]any{"amount": 3})
	second := b.call(ctx, "k-trailer", map[string]any{"amount": 3})
	if first.err != nil || second.err != nil || !second.replayed() {
		t.Fatalf("first %s, second %s; want the second replayed", describe(first), describe(second))
	}
	if got := second.trailer.Get("x-ledger"); len(got) != 1 || got[0] != "entry-3" {
		t.Fatalf("replayed trailer x-ledger %q, want [entry-3]", got)
	}
}
