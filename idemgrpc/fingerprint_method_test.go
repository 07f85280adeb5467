package idemgrpc_test

import (
	"context"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store/memstore"
)

// TestFingerprintIncludesMethod: the same key with the same request bytes on another method
// is another request: FailedPrecondition (ReasonKeyReused), never the first method's reply,
// and the second method's handler does not run.
func TestFingerprintIncludesMethod(t *testing.T) {
	t.Parallel()
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	icpt, err := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{Runner: eng, Scope: idemgrpc.SingleCaller()})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := structpb.NewStruct(map[string]any{"amount": 10})
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(idemgrpc.MetadataKey, "k1"))
	var runs [2]atomic.Int32
	call := func(i int, method string) (any, error) {
		return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: method}, func(context.Context, any) (any, error) {
			runs[i].Add(1)
			return wrapperspb.String(method), nil
		})
	}
	if reply, err := call(0, "/test.Payments/Charge"); err != nil || reply.(*wrapperspb.StringValue).GetValue() != "/test.Payments/Charge" {
		t.Fatalf("first call: %v, %v", reply, err)
	}
	reply, err := call(1, "/test.Payments/Refund")
	if status.Code(err) != codes.FailedPrecondition || reason(err) != idemgrpc.ReasonKeyReused {
		t.Fatalf("same key and bytes on another method: %v, %v; want FailedPrecondition %s", reply, err, idemgrpc.ReasonKeyReused)
	}
	if runs[0].Load() != 1 || runs[1].Load() != 0 {
		t.Fatalf("handlers ran %d and %d times, want 1 and 0", runs[0].Load(), runs[1].Load())
	}
}

// TestMetadataScopeHashesEveryValue: MetadataScope names the caller by every value of its
// metadata entry, not only the first: callers that differ in a later value are apart.
func TestMetadataScopeHashesEveryValue(t *testing.T) {
	t.Parallel()
	scope := idemgrpc.MetadataScope("X-API-Key")
	of := func(vs ...string) string {
		t.Helper()
		md := metadata.MD{}
		md.Append("x-api-key", vs...)
		s, err := scope(metadata.NewIncomingContext(context.Background(), md))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ab, ac, ab2 := of("a", "b"), of("a", "c"), of("a", "b")
	if ab == ac {
		t.Fatalf("values [a b] and [a c] share the scope %q", ab)
	}
	if ab != ab2 {
		t.Fatalf("the same values gave two scopes: %q and %q", ab, ab2)
	}
	if a := of("a"); a == ab {
		t.Fatalf("values [a] and [a b] share the scope %q", a)
	}
}
