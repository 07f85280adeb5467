package idemgrpc_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store/memstore"
)

// callWithKey calls the server interceptor directly (gRPC's own client refuses to send some
// of these keys) with key as the idempotency-key metadata, and returns the handler's runs and
// the call's error.
func callWithKey(t *testing.T, icpt grpc.UnaryServerInterceptor, key string) (int, error) {
	t.Helper()
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(idemgrpc.MetadataKey, key))
	runs := 0
	_, err := icpt(ctx, wrapperspb.String("pay"), &grpc.UnaryServerInfo{FullMethod: "/test.Payments/Pay"},
		func(context.Context, any) (any, error) { runs++; return wrapperspb.String("paid"), nil })
	return runs, err
}

// TestKeyCharacters: a key is 1 to idem.MaxClientKeyLen printable ASCII characters, space
// (0x20) and '~' (0x7e) included; any byte below 0x20 or above 0x7e is refused with
// InvalidArgument (ReasonInvalidKey), wherever it is in the key, and the handler does not run.
func TestKeyCharacters(t *testing.T) {
	t.Parallel()
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	icpt, err := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{Runner: eng, Scope: idemgrpc.SingleCaller()})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a b", "~", " ", "a~z", strings.Repeat("k", idem.MaxClientKeyLen)} {
		if runs, err := callWithKey(t, icpt, k); err != nil || runs != 1 {
			t.Errorf("key %q: %v, handler ran %d times; want accepted", k, err, runs)
		}
	}
	for _, k := range []string{"a\x1fb", "\x01", "ab\x7f", "\x7f", "a\x80", strings.Repeat("k", idem.MaxClientKeyLen+1)} {
		runs, err := callWithKey(t, icpt, k)
		if status.Code(err) != codes.InvalidArgument || reason(err) != idemgrpc.ReasonInvalidKey || runs != 0 {
			t.Errorf("key %q: %v (reason %q), handler ran %d times; want InvalidArgument, %s",
				k, err, reason(err), runs, idemgrpc.ReasonInvalidKey)
		}
	}
}
