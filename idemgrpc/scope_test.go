package idemgrpc_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store/memstore"
)

// TestScopeFuncRefusals: a ScopeFunc that fails, or returns a scope idem.CheckScope refuses
// (here one holding '|', the separator of scope and key), makes the call InvalidArgument
// (ReasonInvalidScope) with the reason in the message, and the handler does not run.
func TestScopeFuncRefusals(t *testing.T) {
	t.Parallel()
	for name, scope := range map[string]idemgrpc.ScopeFunc{
		"error":   func(context.Context) (string, error) { return "", errors.New("no account") },
		"invalid": func(context.Context) (string, error) { return "tenant|1", nil },
	} {
		eng, err := idem.New(memstore.New(), idem.Options{})
		if err != nil {
			t.Fatal(err)
		}
		icpt, err := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{Runner: eng, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		runs, err := callWithKey(t, icpt, "k1")
		if status.Code(err) != codes.InvalidArgument || reason(err) != idemgrpc.ReasonInvalidScope || runs != 0 {
			t.Errorf("%s scope: %v (reason %q), handler ran %d times; want InvalidArgument, %s",
				name, err, reason(err), runs, idemgrpc.ReasonInvalidScope)
		}
		if name == "error" && status.Convert(err).Message() != "invalid scope: no account" {
			t.Errorf("%s scope: message %q, want the ScopeFunc's error", name, status.Convert(err).Message())
		}
	}
}
