package idemgrpc_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store/memstore"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// chargeMethod is the one method of the test service: a structpb.Struct in, a
// wrapperspb.StringValue out, so no generated code is needed.
const chargeMethod = "/test.Payments/Charge"

type handlerFunc func(ctx context.Context, in *structpb.Struct) (*wrapperspb.StringValue, error)

// payments is the test service: it calls whatever handler the test set.
type payments struct{ h atomic.Pointer[handlerFunc] }

func (p *payments) set(h handlerFunc) { p.h.Store(&h) }

var paymentsDesc = grpc.ServiceDesc{
	ServiceName: "test.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Charge",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(structpb.Struct)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return (*srv.(*payments).h.Load())(ctx, req.(*structpb.Struct))
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: chargeMethod}, h)
		},
	}},
}

// recoverPanics is the recovery interceptor a gRPC server should run outermost: a handler
// panic becomes Internal instead of ending the process.
func recoverPanics(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, status.Errorf(codes.Internal, "panic: %v", r)
		}
	}()
	return h(ctx, req)
}

// flakyStore is a memstore that can be made to fail.
type flakyStore struct {
	*memstore.Store
	down atomic.Bool
}

var errDown = errors.New("store is down")

func (s *flakyStore) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	if s.down.Load() {
		return idem.Reservation{}, errDown
	}
	return s.Store.Reserve(ctx, req)
}

type bundle struct {
	svc   *payments
	store *flakyStore
	eng   *idem.Engine
	conn  *grpc.ClientConn
}

type config struct {
	engine    idem.Options
	server    idemgrpc.ServerOptions
	client    *idemgrpc.ClientOptions     // nil: no client interceptor
	inner     grpc.UnaryClientInterceptor // runs inside the client interceptor, once per attempt
	transport string                      // "tcp" (default) or "bufconn"
}

// setup starts a gRPC server with the interceptor (behind a recovery interceptor) on
// 127.0.0.1 or on a bufconn, and a client connected to it.
func setup(t *testing.T, cfg config) *bundle {
	t.Helper()
	b := &bundle{svc: &payments{}, store: &flakyStore{Store: memstore.New()}}
	b.svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		return wrapperspb.String("ok"), nil
	})
	var err error
	quiet := slog.New(slog.DiscardHandler)
	cfg.engine.Logger = cmp.Or(cfg.engine.Logger, quiet)
	cfg.server.Logger = cmp.Or(cfg.server.Logger, quiet)
	if b.eng, err = idem.New(b.store, cfg.engine); err != nil {
		t.Fatal(err)
	}
	cfg.server.Runner = b.eng
	if cfg.server.Scope == nil {
		cfg.server.Scope = idemgrpc.SingleCaller() // one test client
	}
	icpt, err := idemgrpc.UnaryServerInterceptor(cfg.server)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recoverPanics, icpt))
	srv.RegisterService(&paymentsDesc, b.svc)

	dialOpts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if cfg.client != nil {
		ci, err := idemgrpc.UnaryClientInterceptor(*cfg.client)
		if err != nil {
			t.Fatal(err)
		}
		dialOpts = append(dialOpts, grpc.WithChainUnaryInterceptor(ci))
	}
	if cfg.inner != nil {
		dialOpts = append(dialOpts, grpc.WithChainUnaryInterceptor(cfg.inner))
	}
	var lis net.Listener
	target := ""
	switch cfg.transport {
	case "", "tcp":
		if lis, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		target = lis.Addr().String()
	case "bufconn":
		bl := bufconn.Listen(1 << 20)
		lis, target = bl, "passthrough:///bufnet"
		dialOpts = append(dialOpts, grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return bl.DialContext(ctx)
		}))
	default:
		t.Fatalf("unknown transport %q", cfg.transport)
	}
	go func() { _ = srv.Serve(lis) }()
	if b.conn, err = grpc.NewClient(target, dialOpts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.conn.Close()
		srv.Stop()
		b.store.Close()
	})
	return b
}

// call sends one Charge with the given key ("" for none) and request fields.
type reply struct {
	msg     *wrapperspb.StringValue
	header  metadata.MD
	trailer metadata.MD
	err     error
}

func (r reply) replayed() bool {
	v := r.header.Get(idemgrpc.ReplayedKey)
	return len(v) == 1 && v[0] == "true"
}

func (b *bundle) call(ctx context.Context, key string, fields map[string]any) reply {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, key)
	}
	in, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	var r reply
	r.msg = new(wrapperspb.StringValue)
	r.err = b.conn.Invoke(ctx, chargeMethod, in, r.msg, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	if r.err != nil {
		r.msg = nil
	}
	return r
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// reason returns the ErrorInfo reason of err, "" if none.
func reason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}

// retryInfo returns the RetryInfo delay of err and whether it has one.
func retryInfo(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

func describe(r reply) string {
	return fmt.Sprintf("msg=%v err=%v header=%v trailer=%v", r.msg, r.err, r.header, r.trailer)
}
