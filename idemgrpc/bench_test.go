//go:build unix

package idemgrpc_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// BenchmarkUnary measures one unary call, client and server in this process over bufconn,
// without the interceptor (bare) and through it: with a new key each call (the handler runs
// and its reply is stored in memstore), with one key (every call a replay), and without a key
// (pass-through). cpu-ns/op is the process's CPU time (user and system, every goroutine,
// client side included) per call; its difference from bare's is what the interceptor adds.
func BenchmarkUnary(b *testing.B) {
	req, _ := structpb.NewStruct(map[string]any{"amount": 1000, "currency": "eur", "order": "o-1001"})
	for _, bc := range []struct {
		name        string
		interceptor bool
		key         func(i int) string
	}{
		{"bare", false, func(int) string { return "" }},
		{"no-key", true, func(int) string { return "" }},
		{"new-key", true, func(i int) string { return "k-" + strconv.Itoa(i) }},
		{"replay", true, func(int) string { return "same-key" }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			conn := benchServer(b, bc.interceptor)
			prefix := strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
			ctx := context.Background()
			var reply wrapperspb.StringValue
			call := func(i int) {
				cctx := ctx
				if k := bc.key(i); k != "" {
					cctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, prefix+k)
				}
				if err := conn.Invoke(cctx, chargeMethod, req, &reply); err != nil {
					b.Fatal(err)
				}
			}
			// Warm the connection (HTTP/2 windows, buffers) and store the replayed key.
			for i := range 2000 {
				call(-1 - i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; b.Loop(); i++ {
				call(i)
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkInterceptor calls the interceptor directly, without gRPC around it, over memstore:
// the handler alone, then through the interceptor with a new key each call, and with one key
// (replays). The difference from handler's figures is the interceptor's own cost per call;
// cpu-ns/op counts the garbage collector's work on other threads too.
func BenchmarkInterceptor(b *testing.B) {
	req, _ := structpb.NewStruct(map[string]any{"amount": 1000, "currency": "eur", "order": "o-1001"})
	info := &grpc.UnaryServerInfo{FullMethod: chargeMethod}
	handler := func(context.Context, any) (any, error) { return wrapperspb.String("ch_1"), nil }
	for _, bc := range []struct {
		name string
		key  func(i int) string // nil: the handler alone
	}{
		{"handler", nil},
		{"new-key", func(i int) string { return "k-" + strconv.Itoa(i) }},
		{"replay", func(int) string { return "same-key" }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			st := memstore.New()
			defer st.Close()
			eng, _ := idem.New(st, idem.Options{Logger: slog.New(slog.DiscardHandler)})
			icpt, _ := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{Runner: eng, Scope: idemgrpc.SingleCaller()})
			call := func(i int) {
				if bc.key == nil {
					_, _ = handler(context.Background(), req)
					return
				}
				ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(idemgrpc.MetadataKey, bc.key(i)))
				if _, err := icpt(ctx, req, info, handler); err != nil {
					b.Fatal(err)
				}
			}
			call(-1)
			b.ReportAllocs()
			cpu0 := cpuTime()
			for i := 0; b.Loop(); i++ {
				call(i)
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

func benchServer(b *testing.B, withInterceptor bool) *grpc.ClientConn {
	b.Helper()
	svc := &payments{}
	svc.set(func(context.Context, *structpb.Struct) (*wrapperspb.StringValue, error) {
		return wrapperspb.String("ch_1"), nil
	})
	var opts []grpc.ServerOption
	if withInterceptor {
		st := memstore.New()
		b.Cleanup(func() { st.Close() })
		eng, err := idem.New(st, idem.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		icpt, err := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{Runner: eng, Scope: idemgrpc.SingleCaller()})
		if err != nil {
			b.Fatal(err)
		}
		opts = append(opts, grpc.ChainUnaryInterceptor(icpt))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&paymentsDesc, svc)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bench",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return conn
}

// cpuTime returns the CPU time this process has used, user and system, in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
