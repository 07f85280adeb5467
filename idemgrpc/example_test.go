package idemgrpc_test

import (
	"context"
	"fmt"
	"net"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The interceptor is an ordinary grpc.UnaryServerInterceptor; here it is called directly, as
// the server would call it, twice with the same key: the handler runs once, and the second call
// gets the stored reply. Keys belong to the caller that sent them: the scope is the caller's
// API key, hashed under a secret kept apart from the store.
func ExampleUnaryServerInterceptor() {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		panic(err)
	}
	scopeSecret := []byte("from your secret store, 32 bytes") // the same for every server of the store
	icpt, err := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{
		Runner: eng,
		Scope:  idemgrpc.KeyedMetadataScope("x-api-key", scopeSecret),
	})
	if err != nil {
		panic(err)
	}
	// In a server: grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, icpt)).
	info := &grpc.UnaryServerInfo{FullMethod: "/payments.v1.Payments/Charge"}
	charge := func(ctx context.Context, req any) (any, error) {
		fmt.Println("charging", req.(*wrapperspb.Int64Value).GetValue())
		return wrapperspb.String("ch_1"), nil
	}
	ctx := metadata.NewIncomingContext(context.Background(),
		metadata.Pairs(idemgrpc.MetadataKey, "order-1001", "x-api-key", "key_alice"))
	for range 2 {
		reply, err := icpt(ctx, wrapperspb.Int64(1000), info, charge)
		fmt.Println(reply.(*wrapperspb.StringValue).GetValue(), err)
	}
	// A different request with the same key is refused.
	_, err = icpt(ctx, wrapperspb.Int64(9999), info, charge)
	fmt.Println(status.Code(err))
	// Output:
	// charging 1000
	// ch_1 <nil>
	// ch_1 <nil>
	// FailedPrecondition
}

// The client interceptor sends one key per call and retries through a server that is
// unavailable at first. The server here stands for any gRPC server that honours the key.
func ExampleUnaryClientInterceptor() {
	attempts := 0
	srv := grpc.NewServer(grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
		attempts++
		md, _ := metadata.FromIncomingContext(stream.Context())
		fmt.Println("attempt", attempts, "key", md.Get(idemgrpc.MetadataKey))
		var in wrapperspb.Int64Value
		if err := stream.RecvMsg(&in); err != nil {
			return err
		}
		if attempts < 3 {
			return status.Error(codes.Unavailable, "starting up")
		}
		return stream.SendMsg(wrapperspb.String("ch_1"))
	}))
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	ci, err := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{})
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient("passthrough:///payments",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(ci))
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	// The key of this intent, kept with the order so that a restart retries with it too.
	ctx := idemclient.WithKey(context.Background(), "order-1001")
	var reply wrapperspb.StringValue
	err = conn.Invoke(ctx, "/payments.v1.Payments/Charge", wrapperspb.Int64(1000), &reply)
	fmt.Println(reply.GetValue(), err)
	// Output:
	// attempt 1 key [order-1001]
	// attempt 2 key [order-1001]
	// attempt 3 key [order-1001]
	// ch_1 <nil>
}
