// Command grpc pays over gRPC through a network that loses the first answer: the client
// interceptor (idemgrpc.UnaryClientInterceptor) retries with the same idempotency-key, the
// server interceptor (idemgrpc.UnaryServerInterceptor) replays the stored reply, and the card is
// charged once.
//
//	go run ./examples/grpc
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const chargeMethod = "/payments.v1.Payments/Charge"

// charge is the payments handler: it knows nothing of idempotency.
var charges atomic.Int32

func charge(ctx context.Context, req *structpb.Struct) (*wrapperspb.StringValue, error) {
	n := charges.Add(1)
	amount := req.GetFields()["amount"].GetNumberValue()
	return wrapperspb.String(fmt.Sprintf("ch_%d for %.0f", n, amount)), nil
}

// The service, registered by hand so that the example needs no generated code: a
// structpb.Struct in, a wrapperspb.StringValue out.
var paymentsDesc = grpc.ServiceDesc{
	ServiceName: "payments.v1.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Charge",
		Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(structpb.Struct)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) { return charge(ctx, req.(*structpb.Struct)) }
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: chargeMethod}, h)
		},
	}},
}

// loseFirstAnswer stands for the network: the first call reaches the server and runs, and its
// answer is lost on the way back (the client sees Unavailable).
func loseFirstAnswer() grpc.UnaryServerInterceptor {
	var calls atomic.Int32
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		reply, err := h(ctx, req)
		if calls.Add(1) == 1 {
			if v, ok := reply.(*wrapperspb.StringValue); ok {
				fmt.Printf("network: the server answered %q, but the answer is lost\n", v.GetValue())
			}
			return nil, status.Error(codes.Unavailable, "connection reset")
		}
		return reply, err
	}
}

func main() {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	server, err := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{
		Runner:     eng,
		RequireKey: true,
		Scope:      idemgrpc.SingleCaller(), // one client in this demo: scope by the caller's identity (KeyedMetadataScope) in a real service
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(loseFirstAnswer(), server))
	srv.RegisterService(&paymentsDesc, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	client, err := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{BaseDelay: 50 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(client))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	req, _ := structpb.NewStruct(map[string]any{"order": "o-1001", "amount": 1000})
	var reply wrapperspb.StringValue
	var header metadata.MD
	if err := conn.Invoke(context.Background(), chargeMethod, req, &reply, grpc.Header(&header)); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("client: got %q (replayed: %v)\n", reply.GetValue(), header.Get(idemgrpc.ReplayedKey))
	fmt.Println("charges made:", charges.Load())
}
