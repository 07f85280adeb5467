package idemgrpc_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store/memstore"
)

// lockedBuffer is a log destination safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// completeFails is a store whose Complete fails while fail is set.
type completeFails struct {
	*memstore.Store
	fail bool
}

func (s *completeFails) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	if s.fail {
		return errors.New("complete refused")
	}
	return s.Store.Complete(ctx, key, token, resp, now, expiresAt)
}

// TestUnstoredReplyWarnsTheLogger: a handler that ran but whose reply could not be stored
// answers its own reply, and the warning goes to ServerOptions.Logger; a handler's error
// answer that was stored is no warning.
func TestUnstoredReplyWarnsTheLogger(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fail     bool
		reply    error
		wantWarn bool
	}{
		{"stored error answer", false, status.Error(codes.NotFound, "no such order"), false},
		{"stored reply", false, nil, false},
		{"unstored reply", true, nil, true},
	} {
		st := &completeFails{Store: memstore.New(), fail: tc.fail}
		eng, err := idem.New(st, idem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var logs lockedBuffer
		icpt, err := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{Runner: eng, Scope: idemgrpc.SingleCaller(),
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(idemgrpc.MetadataKey, "k-"+tc.name))
		_, err = icpt(ctx, wrapperspb.String("pay"), &grpc.UnaryServerInfo{FullMethod: "/test.Payments/Pay"},
			func(context.Context, any) (any, error) {
				if tc.reply != nil {
					return nil, tc.reply
				}
				return wrapperspb.String("paid"), nil
			})
		if status.Code(err) != status.Code(tc.reply) {
			t.Errorf("%s: %v, want the handler's own answer %v", tc.name, err, tc.reply)
		}
		warned := strings.Contains(logs.String(), "could not be stored")
		if warned != tc.wantWarn {
			t.Errorf("%s: warned %v, want %v; log: %q", tc.name, warned, tc.wantWarn, logs.String())
		}
	}
}
