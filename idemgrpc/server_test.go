package idemgrpc_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// 50 concurrent calls with one key: the handler runs once, and every caller gets the same
// reply, header and trailer; all but one are marked replayed. On loopback TCP and on bufconn.
func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{"tcp", "bufconn"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			b := setup(t, config{transport: transport, engine: idem.Options{Wait: 20 * time.Second, PollInterval: 5 * time.Millisecond}})
			var runs atomic.Int32
			b.svc.set(func(ctx context.Context, in *structpb.Struct) (*wrapperspb.StringValue, error) {
				n := runs.Add(1)
				time.Sleep(50 * time.Millisecond) // let the duplicates pile up
				_ = grpc.SetHeader(ctx, metadata.Pairs("x-charge-id", "ch_1"))
				_ = grpc.SetTrailer(ctx, metadata.Pairs("x-ledger", "entry-9"))
				return wrapperspb.String("charged " + in.Fields["amount"].String() + " run " + string(rune('0'+n))), nil
			})
			ctx := ctxT(t)
			const n = 50
			replies := make([]reply, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { replies[i] = b.call(ctx, "order-1001", map[string]any{"amount": 1000, "currency": "eur"}) })
			}
			wg.Wait()
			if r := runs.Load(); r != 1 {
				t.Fatalf("handler ran %d times, want 1", r)
			}
			first, replayed := -1, 0
			for i, r := range replies {
				if r.err != nil {
					t.Fatalf("call %d: %v", i, r.err)
				}
				if r.replayed() {
					replayed++
				} else {
					first = i
				}
				if got := r.header.Get("x-charge-id"); len(got) != 1 || got[0] != "ch_1" {
					t.Fatalf("call %d: header %v", i, r.header)
				}
				if got := r.trailer.Get("x-ledger"); len(got) != 1 || got[0] != "entry-9" {
					t.Fatalf("call %d: trailer %v", i, r.trailer)
				}
			}
			if replayed != n-1 || first < 0 {
				t.Fatalf("%d replayed, want %d", replayed, n-1)
			}
			for i, r := range replies {
				if !proto.Equal(r.msg, replies[first].msg) {
					t.Fatalf("call %d got %v, the first got %v", i, r.msg, replies[first].msg)
				}
			}
		})
	}
}

// The same key with another request, or to another method's fingerprint, is refused with
// FailedPrecondition and the handler does not run.
func TestMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t, config{})
	var runs atomic.Int32
	b.svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		return wrapperspb.String("ok"), nil
	})
	ctx := ctxT(t)
	if r := b.call(ctx, "k", map[string]any{"amount": 10}); r.err != nil {
		t.Fatal(r.err)
	}
	r := b.call(ctx, "k", map[string]any{"amount": 99})
	if status.Code(r.err) != codes.FailedPrecondition || reason(r.err) != idemgrpc.ReasonKeyReused {
		t.Fatalf("got %s", describe(r))
	}
	// Field order in the request does not matter: deterministic marshalling of a map.
	if r := b.call(ctx, "k2", map[string]any{"a": 1, "b": 2, "c": 3}); r.err != nil {
		t.Fatal(r.err)
	}
	for range 5 {
		if r := b.call(ctx, "k2", map[string]any{"c": 3, "b": 2, "a": 1}); r.err != nil || !r.replayed() {
			t.Fatalf("same request, same key: %s", describe(r))
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
}

// A duplicate that arrives while the first call runs gets Aborted with a RetryInfo (the engine
// does not wait by default); once the first finishes, it gets the reply.
func TestInFlightAborted(t *testing.T) {
	t.Parallel()
	b := setup(t, config{engine: idem.Options{Lease: 10 * time.Second}})
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
	r := b.call(ctx, "k", nil)
	if status.Code(r.err) != codes.Aborted || reason(r.err) != idemgrpc.ReasonInFlight {
		t.Fatalf("duplicate in flight: %s", describe(r))
	}
	if d, ok := retryInfo(r.err); !ok || d < time.Second || d > 10*time.Second {
		t.Fatalf("RetryInfo %s %v, want 1s..10s", d, ok)
	}
	close(release)
	if r := <-done; r.err != nil || r.msg.GetValue() != "done" {
		t.Fatalf("first: %s", describe(r))
	}
	if r := b.call(ctx, "k", nil); r.err != nil || !r.replayed() || r.msg.GetValue() != "done" {
		t.Fatalf("after: %s", describe(r))
	}
}

// A store that cannot be reached: Unavailable with a RetryInfo, and the handler does not run.
func TestStoreDownUnavailable(t *testing.T) {
	t.Parallel()
	b := setup(t, config{server: idemgrpc.ServerOptions{StoreRetryAfter: 3 * time.Second}})
	b.svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		t.Error("handler ran with the store down")
		return wrapperspb.String("no"), nil
	})
	b.store.down.Store(true)
	r := b.call(ctxT(t), "k", nil)
	if status.Code(r.err) != codes.Unavailable || reason(r.err) != idemgrpc.ReasonStoreUnavailable {
		t.Fatalf("got %s", describe(r))
	}
	if d, ok := retryInfo(r.err); !ok || d != 3*time.Second {
		t.Fatalf("RetryInfo %s %v, want 3s", d, ok)
	}
}

func TestKeyRules(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	count := func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		return wrapperspb.String("ok"), nil
	}
	// Not required: a call without a key passes through, every time.
	b := setup(t, config{})
	b.svc.set(count)
	ctx := ctxT(t)
	for range 2 {
		if r := b.call(ctx, "", nil); r.err != nil || r.replayed() {
			t.Fatalf("no key: %s", describe(r))
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("ran %d times, want 2", n)
	}
	// Required on the one method listed.
	req := setup(t, config{server: idemgrpc.ServerOptions{RequireKey: true, Methods: []string{chargeMethod}}})
	req.svc.set(count)
	r := req.call(ctx, "", nil)
	if status.Code(r.err) != codes.InvalidArgument || reason(r.err) != idemgrpc.ReasonMissingKey {
		t.Fatalf("missing key: %s", describe(r))
	}
	for _, bad := range []string{strings.Repeat("k", idem.MaxClientKeyLen+1), ""} {
		r := req.call(metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, bad), "", nil)
		if status.Code(r.err) != codes.InvalidArgument || reason(r.err) != idemgrpc.ReasonInvalidKey {
			t.Fatalf("key %q: %s", bad, describe(r))
		}
	}
	twice := metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, "a", idemgrpc.MetadataKey, "b")
	if r := req.call(twice, "", nil); status.Code(r.err) != codes.InvalidArgument {
		t.Fatalf("two keys: %s", describe(r))
	}
	if r := req.call(ctx, strings.Repeat("k", idem.MaxClientKeyLen), nil); r.err != nil {
		t.Fatalf("longest key: %s", describe(r))
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("ran %d times, want 3", n)
	}
	// A method not listed passes through even when keys are required.
	other := setup(t, config{server: idemgrpc.ServerOptions{RequireKey: true, Methods: []string{"/test.Payments/Refund"}}})
	other.svc.set(count)
	if r := other.call(ctx, "", nil); r.err != nil {
		t.Fatalf("unlisted method: %s", describe(r))
	}
	if _, err := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{Runner: b.eng, Scope: idemgrpc.SingleCaller(), Methods: []string{"Charge"}}); err == nil {
		t.Fatal("a method name without service was accepted")
	}
	if _, err := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{}); err == nil {
		t.Fatal("no engine was accepted")
	}
}

// Which handler errors are kept and replayed, which released, which held: the engine's
// default policy seen through HTTPStatus, with Canceled and DeadlineExceeded uncertain.
func TestHandlerErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code codes.Code
		want string // "keep", "release" or "hold"
	}{
		{codes.InvalidArgument, "keep"},
		{codes.NotFound, "keep"},
		{codes.FailedPrecondition, "keep"},
		{codes.OutOfRange, "keep"},
		{codes.Unavailable, "release"},
		{codes.Internal, "release"},
		{codes.Unknown, "release"},
		{codes.ResourceExhausted, "release"},
		{codes.Aborted, "release"},
		{codes.PermissionDenied, "release"},
		{codes.Unauthenticated, "release"},
		{codes.DeadlineExceeded, "hold"},
		{codes.Canceled, "hold"},
	}
	for _, tc := range cases {
		t.Run(tc.code.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, config{engine: idem.Options{Lease: 20 * time.Second}})
			var runs atomic.Int32
			b.svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
				if runs.Add(1) > 1 {
					return wrapperspb.String("second run"), nil
				}
				st, _ := status.New(tc.code, "first run failed").WithDetails(&errdetails.ErrorInfo{Reason: "CARD_DECLINED", Domain: "bank"})
				return nil, st.Err()
			})
			ctx := ctxT(t)
			r1 := b.call(ctx, "k", map[string]any{"amount": 1})
			if status.Code(r1.err) != tc.code {
				t.Fatalf("first: %s", describe(r1))
			}
			r2 := b.call(ctx, "k", map[string]any{"amount": 1})
			switch tc.want {
			case "keep":
				if !r2.replayed() || !proto.Equal(status.Convert(r2.err).Proto(), status.Convert(r1.err).Proto()) || runs.Load() != 1 {
					t.Fatalf("not replayed: %s (runs %d)", describe(r2), runs.Load())
				}
			case "release":
				if r2.err != nil || r2.msg.GetValue() != "second run" || runs.Load() != 2 {
					t.Fatalf("not released: %s (runs %d)", describe(r2), runs.Load())
				}
			case "hold":
				if status.Code(r2.err) != codes.Aborted || runs.Load() != 1 {
					t.Fatalf("not held: %s (runs %d)", describe(r2), runs.Load())
				}
			}
		})
	}
}

// A handler that panics releases the claim (the recovery interceptor outside answers
// Internal), so the retry runs the handler.
func TestHandlerPanicReleases(t *testing.T) {
	t.Parallel()
	b := setup(t, config{})
	var runs atomic.Int32
	b.svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		if runs.Add(1) == 1 {
			panic("bug in the handler")
		}
		return wrapperspb.String("ok"), nil
	})
	ctx := ctxT(t)
	if r := b.call(ctx, "k", nil); status.Code(r.err) != codes.Internal {
		t.Fatalf("panic: %s", describe(r))
	}
	if r := b.call(ctx, "k", nil); r.err != nil || r.replayed() || r.msg.GetValue() != "ok" || runs.Load() != 2 {
		t.Fatalf("retry: %s (runs %d)", describe(r), runs.Load())
	}
}

// Tenants are apart: the same key in two scopes runs twice; in one scope, once.
func TestScope(t *testing.T) {
	t.Parallel()
	b := setup(t, config{server: idemgrpc.ServerOptions{Scope: idemgrpc.MetadataScope("X-API-Key")}})
	var runs atomic.Int32
	b.svc.set(func(ctx context.Context, _ *structpb.Struct) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		return wrapperspb.String(metadata.ValueFromIncomingContext(ctx, "x-api-key")[0]), nil
	})
	ctx := ctxT(t)
	for _, tenant := range []string{"alice", "bob", "alice", "bob"} {
		r := b.call(metadata.AppendToOutgoingContext(ctx, "x-api-key", tenant), "same-key", nil)
		if r.err != nil || r.msg.GetValue() != tenant {
			t.Fatalf("%s: %s", tenant, describe(r))
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("ran %d times, want 2", n)
	}
}

// A replay whose stored type cannot be resolved is Internal, never a reply of another type.
func TestReplayUnknownType(t *testing.T) {
	t.Parallel()
	b := setup(t, config{server: idemgrpc.ServerOptions{Types: new(protoregistry.Types)}})
	ctx := ctxT(t)
	if r := b.call(ctx, "k", nil); r.err != nil {
		t.Fatal(r.err)
	}
	r := b.call(ctx, "k", nil)
	if status.Code(r.err) != codes.Internal || reason(r.err) != idemgrpc.ReasonNotReplayable {
		t.Fatalf("got %s", describe(r))
	}
}

// One name for one thing: the metadata keys are the HTTP headers in lower case.
func TestNames(t *testing.T) {
	t.Parallel()
	if idemgrpc.MetadataKey != strings.ToLower(idem.KeyHeader) {
		t.Errorf("MetadataKey %q is not idem.KeyHeader %q in lower case", idemgrpc.MetadataKey, idem.KeyHeader)
	}
	if idemgrpc.ReplayedKey != strings.ToLower(idemhttp.ReplayedHeader) {
		t.Errorf("ReplayedKey %q is not idemhttp.ReplayedHeader %q in lower case", idemgrpc.ReplayedKey, idemhttp.ReplayedHeader)
	}
}

// A reply above MaxReplyBytes reaches the first caller whole and is not kept: a retry gets
// AlreadyExists, and the handler does not run again.
func TestReplyTooLargeNotRetained(t *testing.T) {
	t.Parallel()
	b := setup(t, config{server: idemgrpc.ServerOptions{MaxReplyBytes: 1000}})
	var runs atomic.Int32
	big := strings.Repeat("x", 2000)
	b.svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		return wrapperspb.String(big), nil
	})
	ctx := ctxT(t)
	if r := b.call(ctx, "k", nil); r.err != nil || r.msg.GetValue() != big {
		t.Fatalf("first: err %v, %d bytes", r.err, len(r.msg.GetValue()))
	}
	r := b.call(ctx, "k", nil)
	if status.Code(r.err) != codes.AlreadyExists || reason(r.err) != idemgrpc.ReasonNotRetained || !r.replayed() {
		t.Fatalf("retry: %s", describe(r))
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

func TestHTTPStatus(t *testing.T) {
	t.Parallel()
	for c, want := range map[codes.Code]int{codes.OK: 200, codes.NotFound: 404, codes.AlreadyExists: 409,
		codes.Unavailable: 503, codes.DataLoss: 500, codes.Code(99): 500} {
		if got := idemgrpc.HTTPStatus(c); got != want {
			t.Errorf("HTTPStatus(%s) = %d, want %d", c, got, want)
		}
	}
}

// A record names the gRPC method that claimed it, as its route.
func TestRecordRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, config{})
	ctx := ctxT(t)
	if r := b.call(ctx, "route-key", nil); r.err != nil {
		t.Fatal(describe(r))
	}
	rec, err := b.store.Get(ctx, idemhttp.StorageKey("", "route-key"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Route != "/test.Payments/Charge" {
		t.Errorf("record's route %q, want the method /test.Payments/Charge", rec.Route)
	}
}

// A server interceptor without a scope decision is refused: one scope for every caller would
// hand one caller's stored reply to another who sends the same key and request.
func TestScopeRequired(t *testing.T) {
	t.Parallel()
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{Runner: eng})
	if !errors.Is(err, idem.ErrInvalidInput) ||
		!strings.Contains(err.Error(), "idemgrpc: invalid options: ServerOptions.Scope") {
		t.Fatalf("no scope: err %v, want idem.ErrInvalidInput naming idemgrpc: invalid options: ServerOptions.Scope", err)
	}
	if _, err := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{Runner: eng, Scope: idemgrpc.SingleCaller()}); err != nil {
		t.Fatalf("SingleCaller: %v", err)
	}
}

// The metadata scopes hash every value, each with its length: lists of values that join to
// the same text are different callers, and the keyed form depends on its secret.
func TestMetadataScopes(t *testing.T) {
	t.Parallel()
	scope := func(f idemgrpc.ScopeFunc, vs ...string) string {
		t.Helper()
		md := metadata.MD{}
		for _, v := range vs {
			md.Append("x-api-key", v)
		}
		s, err := f(metadata.NewIncomingContext(context.Background(), md))
		if err != nil {
			t.Fatal(err)
		}
		if !idemhttp.ValidScope(s) {
			t.Fatalf("scope %q is not a valid scope", s)
		}
		return s
	}
	secret := []byte("a secret of sixteen bytes or more")
	for name, f := range map[string]idemgrpc.ScopeFunc{
		"MetadataScope":      idemgrpc.MetadataScope("X-API-Key"),
		"KeyedMetadataScope": idemgrpc.KeyedMetadataScope("X-API-Key", secret),
	} {
		if s := scope(f); s != "" {
			t.Errorf("%s: no metadata: scope %q, want anonymous", name, s)
		}
		seen := map[string][]string{}
		for _, vs := range [][]string{{"a\nb"}, {"a", "b"}, {"ab"}, {"a", "", "b"}, {"a\n", "b"}, {"", "ab"}, {"alice"}, {"bob"}} {
			s := scope(f, vs...)
			if prev, ok := seen[s]; ok {
				t.Errorf("%s: values %q and %q share the scope %s", name, prev, vs, s)
			}
			seen[s] = vs
			if again := scope(f, vs...); again != s {
				t.Errorf("%s: %q: scope %s then %s", name, vs, s, again)
			}
		}
	}
	if scope(idemgrpc.MetadataScope("x-api-key"), "alice") == scope(idemgrpc.KeyedMetadataScope("x-api-key", secret), "alice") {
		t.Error("the keyed scope is the unkeyed hash")
	}
	if scope(idemgrpc.KeyedMetadataScope("x-api-key", secret), "alice") == scope(idemgrpc.KeyedMetadataScope("x-api-key", []byte("another secret, sixteen bytes+")), "alice") {
		t.Error("the keyed scope does not depend on its secret")
	}
}

// Tenants are apart with the keyed scope too: bob, sending alice's key and request, gets a
// reply of his own.
func TestKeyedMetadataScope(t *testing.T) {
	t.Parallel()
	b := setup(t, config{server: idemgrpc.ServerOptions{Scope: idemgrpc.KeyedMetadataScope("x-api-key", []byte("a secret of sixteen bytes or more"))}})
	var runs atomic.Int32
	b.svc.set(func(ctx context.Context, _ *structpb.Struct) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		return wrapperspb.String(metadata.ValueFromIncomingContext(ctx, "x-api-key")[0]), nil
	})
	ctx := ctxT(t)
	for _, tenant := range []string{"alice", "bob", "alice", "bob"} {
		r := b.call(metadata.AppendToOutgoingContext(ctx, "x-api-key", tenant), "same-key", nil)
		if r.err != nil || r.msg.GetValue() != tenant {
			t.Fatalf("%s: %s", tenant, describe(r))
		}
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("ran %d times, want 2", n)
	}
}
