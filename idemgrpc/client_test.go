package idemgrpc_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// attempts counts the attempts the client interceptor makes, from inside it.
type attempts struct {
	mu   sync.Mutex
	keys []string
}

func (a *attempts) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	a.mu.Lock()
	a.keys = append(a.keys, md.Get(idemgrpc.MetadataKey)...)
	a.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (a *attempts) get() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.keys...)
}

// sameKey checks that every attempt carried one key, the same.
func sameKey(t *testing.T, keys []string, n int) {
	t.Helper()
	if len(keys) != n {
		t.Fatalf("%d attempts (keys %q), want %d", len(keys), keys, n)
	}
	for _, k := range keys {
		if k != keys[0] || k == "" {
			t.Fatalf("keys differ between attempts: %q", keys)
		}
	}
}

var fastRetries = idemgrpc.ClientOptions{BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond, MaxElapsed: 20 * time.Second}

// A server that fails the first attempts with Unavailable (released, so nothing is stored):
// the client retries with the same key until the handler succeeds.
func TestClientRetriesUnavailable(t *testing.T) {
	t.Parallel()
	var att attempts
	opt := fastRetries
	b := setup(t, config{client: &opt, inner: att.intercept})
	var runs atomic.Int32
	b.svc.set(func(ctx context.Context, _ *structpb.Struct) (*wrapperspb.StringValue, error) {
		if runs.Add(1) <= 2 {
			return nil, status.Error(codes.Unavailable, "warming up")
		}
		return wrapperspb.String("charged"), nil
	})
	r := b.call(ctxT(t), "", map[string]any{"amount": 5})
	if r.err != nil || r.msg.GetValue() != "charged" {
		t.Fatalf("got %s", describe(r))
	}
	sameKey(t, att.get(), 3)
	if n := runs.Load(); n != 3 {
		t.Fatalf("handler ran %d times, want 3", n)
	}
	// A second intent gets a new key.
	if r := b.call(ctxT(t), "", map[string]any{"amount": 5}); r.err != nil {
		t.Fatal(r.err)
	}
	if keys := att.get(); keys[3] == keys[0] {
		t.Fatalf("two calls shared key %q", keys[0])
	}
}

// A duplicate sent while the first call runs gets Aborted with RetryInfo; the client waits
// that long, retries with the same key and gets the first call's reply, replayed.
func TestClientWaitsOutInFlight(t *testing.T) {
	t.Parallel()
	var att attempts
	opt := fastRetries
	// A lease of 1s makes the in-flight answer's RetryInfo 1s (the lease's remainder).
	b := setup(t, config{client: &opt, inner: att.intercept, engine: idem.Options{Lease: time.Second}})
	started := make(chan struct{})
	var runs atomic.Int32
	b.svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		close(started)
		time.Sleep(300 * time.Millisecond)
		return wrapperspb.String("first"), nil
	})
	ctx := idemclient.WithKey(ctxT(t), "intent-1")
	first := make(chan reply)
	go func() { first <- b.call(ctx, "", nil) }()
	<-started
	begin := time.Now()
	r := b.call(ctx, "", nil)
	if r.err != nil || !r.replayed() || r.msg.GetValue() != "first" {
		t.Fatalf("duplicate: %s", describe(r))
	}
	if took := time.Since(begin); took < 900*time.Millisecond {
		t.Fatalf("retried after %s, before the server's RetryInfo (1s)", took)
	}
	if r := <-first; r.err != nil || r.replayed() {
		t.Fatalf("first: %s", describe(r))
	}
	keys := att.get()
	for _, k := range keys {
		if k != "intent-1" {
			t.Fatalf("keys %q, want intent-1 on every attempt", keys)
		}
	}
	if len(keys) != 3 || runs.Load() != 1 {
		t.Fatalf("%d attempts, %d runs; want 3 and 1", len(keys), runs.Load())
	}
}

// An attempt that runs out of time (AttemptTimeout) is retried with the same key while the
// call's context lasts; the handler, which finished anyway, ran once.
func TestClientAttemptTimeout(t *testing.T) {
	t.Parallel()
	var att attempts
	opt := fastRetries
	opt.AttemptTimeout = 100 * time.Millisecond
	opt.MaxAttempts = 200 // the handler's 300ms may take far longer on a loaded machine
	b := setup(t, config{client: &opt, inner: att.intercept, engine: idem.Options{Lease: time.Second}})
	var runs atomic.Int32
	b.svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		runs.Add(1)
		time.Sleep(300 * time.Millisecond) // past the attempt's deadline; the work is done anyway
		return wrapperspb.String("slow but done"), nil
	})
	r := b.call(ctxT(t), "", nil)
	if r.err != nil || r.msg.GetValue() != "slow but done" || !r.replayed() {
		t.Fatalf("got %s", describe(r))
	}
	keys := att.get()
	sameKey(t, keys, len(keys))
	if len(keys) < 2 || runs.Load() != 1 {
		t.Fatalf("%d attempts, %d runs; want at least 2 and 1", len(keys), runs.Load())
	}
}

func TestClientDoesNotRetry(t *testing.T) {
	t.Parallel()
	var att attempts
	opt := fastRetries
	opt.MaxAttempts = 3
	b := setup(t, config{client: &opt, inner: att.intercept, engine: idem.Options{}})
	b.svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		return nil, status.Error(codes.InvalidArgument, "bad amount")
	})
	if r := b.call(ctxT(t), "", nil); status.Code(r.err) != codes.InvalidArgument {
		t.Fatalf("got %s", describe(r))
	}
	sameKey(t, att.get(), 1)

	// The caller's own deadline is not retried.
	var att2 attempts
	b2 := setup(t, config{client: &opt, inner: att2.intercept})
	b2.svc.set(func(ctx context.Context, _ *structpb.Struct) (*wrapperspb.StringValue, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if r := b2.call(ctx, "", nil); status.Code(r.err) != codes.DeadlineExceeded {
		t.Fatalf("got %s", describe(r))
	}
	sameKey(t, att2.get(), 1)

	// Unavailable every time: MaxAttempts attempts, then the last error as it is.
	var att3 attempts
	b3 := setup(t, config{client: &opt, inner: att3.intercept})
	b3.svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		return nil, status.Error(codes.Unavailable, "down for good")
	})
	r := b3.call(ctxT(t), "caller-key", nil)
	if status.Code(r.err) != codes.Unavailable || status.Convert(r.err).Message() != "down for good" {
		t.Fatalf("got %s", describe(r))
	}
	keys := att3.get()
	sameKey(t, keys, 3)
	if keys[0] != "caller-key" {
		t.Fatalf("the caller's key was replaced: %q", keys)
	}
}

func TestClientOptions(t *testing.T) {
	t.Parallel()
	for _, opt := range []idemgrpc.ClientOptions{
		{MaxAttempts: -1}, {BaseDelay: -1}, {BaseDelay: time.Second, MaxDelay: time.Millisecond},
		{MaxElapsed: -1}, {AttemptTimeout: -1},
	} {
		if _, err := idemgrpc.UnaryClientInterceptor(opt); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%+v: %v, want idem.ErrInvalidInput", opt, err)
		}
	}
}
