package idemlambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/internal/storehook"
)

var errReleaseDown = errors.New("release refused")

// A handler's error whose release fails comes back joined with ErrReleaseFailed (not
// ErrStoreUnavailable: the handler ran), for Wrap and for proxy events; the key is in flight.
func TestDynamoReleaseErrorJoined(t *testing.T) {
	t.Parallel()
	failRelease := storehook.Wrap(dynamoStore(t), storehook.Hooks{Before: func(_ context.Context, op storehook.Op) error {
		if op == storehook.Release {
			return errReleaseDown
		}
		return nil
	}})
	eng, err := idem.New(failRelease, idem.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	errHandler := errors.New("payment provider said no")
	h, _ := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "id", Logger: quiet},
		func(context.Context, json.RawMessage) (string, error) { return "", errHandler })
	_, err = h(context.Background(), json.RawMessage(`{"id":"o-1"}`))
	if !errors.Is(err, errHandler) || !errors.Is(err, idemlambda.ErrReleaseFailed) || errors.Is(err, idem.ErrStoreUnavailable) {
		t.Fatalf("Wrap: %v", err)
	}
	if _, err := h(context.Background(), json.RawMessage(`{"id":"o-1"}`)); !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("retry after the failed release: %v, want ErrInFlight", err)
	}
	// A released claim that is someone else's by now (lease lost) is nothing to report; a
	// handler error whose release worked is returned as it is.
	ok, _ := idemlambda.Wrap(idemlambda.Options{Runner: newEngine(t, idem.Options{}), KeyPath: "id", Logger: quiet},
		func(context.Context, json.RawMessage) (string, error) { return "", errHandler })
	if _, err := ok(context.Background(), json.RawMessage(`{"id":"o-1"}`)); err != errHandler {
		t.Fatalf("a release that worked: %v", err)
	}

	px, _ := idemlambda.WrapHTTPAPI(idemlambda.ProxyOptions{Runner: eng, Logger: quiet},
		func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			return events.APIGatewayV2HTTPResponse{}, errHandler
		})
	if _, err := px(context.Background(), v2Request("t1", "k-1", `{}`)); !errors.Is(err, errHandler) || !errors.Is(err, idemlambda.ErrReleaseFailed) {
		t.Fatalf("WrapHTTPAPI: %v", err)
	}
}

// A result stored by an invocation is in the engine's cache at once: a duplicate that reaches
// the same function instance is answered without a store call.
func TestDynamoCacheFilledOnComplete(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	counted := storehook.Wrap(dynamoStore(t), storehook.Hooks{Before: func(context.Context, storehook.Op) error {
		calls.Add(1)
		return nil
	}})
	eng, err := idem.New(counted, idem.Options{Logger: quiet, CacheSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h, _ := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "id", Logger: quiet},
		func(context.Context, json.RawMessage) (int, error) { runs++; return runs, nil })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // as Lambda gives
	defer cancel()
	if n, err := h(ctx, json.RawMessage(`{"id":"o-1"}`)); err != nil || n != 1 {
		t.Fatalf("first: %d %v", n, err)
	}
	before := calls.Load()
	for range 3 {
		if n, err := h(ctx, json.RawMessage(`{"id":"o-1"}`)); err != nil || n != 1 {
			t.Fatalf("duplicate: %d %v", n, err)
		}
	}
	if n := calls.Load() - before; n != 0 {
		t.Fatalf("duplicates made %d store calls, want 0", n)
	}
	// Another key still goes to the store.
	if n, err := h(ctx, json.RawMessage(`{"id":"o-2"}`)); err != nil || n != 2 || calls.Load() == before {
		t.Fatalf("another key: %d %v", n, err)
	}
}
