package idemlambda_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
)

// An invocation that outlives its deadline (Lambda stops it there; here it is stuck) holds its
// claim until the deadline plus LeaseMargin, heartbeats included, and not for the engine's much
// longer lease: a duplicate before then is in flight, the retry after it runs the handler, and
// the stuck invocation is fenced off.
func TestDynamoLeaseBoundedByDeadline(t *testing.T) {
	t.Parallel()
	const (
		remaining = 2 * time.Second
		margin    = 1500 * time.Millisecond
	)

	// run invokes h with a context whose deadline is remaining away, as Lambda sets it, and
	// reports when the handler has started; the handler then blocks until release is closed.
	type kind struct {
		name   string
		handle func(eng *idem.Engine, started chan<- struct{}, release <-chan struct{}) any
		event  []byte
		// check reports whether out/err is the answer of a run of the handler (ran), or of a
		// refusal because the key is in flight (inFlight).
		ran, inFlight func(out []byte, err error) bool
	}
	kinds := []kind{
		{
			name: "generic",
			handle: func(eng *idem.Engine, started chan<- struct{}, release <-chan struct{}) any {
				var first atomic.Bool // the first run holds; a retry runs through
				h, err := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "id", LeaseMargin: margin},
					func(ctx context.Context, ev map[string]any) (string, error) {
						if first.CompareAndSwap(false, true) {
							started <- struct{}{}
							<-release
						}
						return "done", nil
					})
				if err != nil {
					t.Fatal(err)
				}
				return h
			},
			event:    []byte(`{"id":"evt-lease"}`),
			ran:      func(out []byte, err error) bool { return err == nil && string(out) == `"done"` },
			inFlight: func(out []byte, err error) bool { return errors.Is(err, idem.ErrInFlight) },
		},
		{
			name: "http-v2",
			handle: func(eng *idem.Engine, started chan<- struct{}, release <-chan struct{}) any {
				var first atomic.Bool // the first run holds; a retry runs through
				h, err := idemlambda.WrapHTTPAPI(idemlambda.ProxyOptions{Runner: eng, LeaseMargin: margin, Logger: quiet},
					func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
						if first.CompareAndSwap(false, true) {
							started <- struct{}{}
							<-release
						}
						return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: "done"}, nil
					})
				if err != nil {
					t.Fatal(err)
				}
				return h
			},
			event: mustJSON(t, v2Request("tenant-a", "k-lease", "{}")),
			ran: func(out []byte, err error) bool {
				return err == nil && string(out) == `{"statusCode":201,"headers":null,"multiValueHeaders":null,"body":"done","cookies":null}`
			},
			inFlight: func(out []byte, err error) bool {
				return err == nil && strings.Contains(string(out), `"statusCode":409`)
			},
		},
	}
	// With heartbeats, each extension is capped too; without, the claim's first lease must be.
	beats := map[string]time.Duration{"heartbeats": 100 * time.Millisecond, "no-heartbeats": -1}
	for _, k := range kinds {
		for bname, beat := range beats {
			t.Run(k.name+"/"+bname, func(t *testing.T) {
				t.Parallel()
				eng := dynamoEngine(t, idem.Options{Lease: 20 * time.Second, Heartbeat: beat})
				started, release := make(chan struct{}), make(chan struct{})
				h := lambda.NewHandler(k.handle(eng, started, release))
				ctx, cancel := context.WithTimeout(context.Background(), remaining)
				defer cancel()
				deadline, _ := ctx.Deadline()
				type result struct {
					out []byte
					err error
				}
				first := make(chan result, 1)
				go func() { out, err := h.Invoke(ctx, k.event); first <- result{out, err} }()
				select {
				case <-started:
				case r := <-first:
					t.Fatalf("the first invocation ended before its handler ran: %s %v", r.out, r.err)
				}

				dup := func() ([]byte, error) { return h.Invoke(context.Background(), k.event) }
				if out, err := dup(); !k.inFlight(out, err) {
					t.Fatalf("duplicate while the first runs: %s %v", out, err)
				}
				// Past the deadline, within the margin: the stuck invocation may still be running.
				time.Sleep(time.Until(deadline.Add(300 * time.Millisecond)))
				if out, err := dup(); !k.inFlight(out, err) {
					t.Fatalf("duplicate just after the deadline: %s %v", out, err)
				}
				// Past the deadline and the margin: the retry runs the handler.
				time.Sleep(time.Until(deadline.Add(margin + 300*time.Millisecond)))
				if out, err := dup(); !k.ran(out, err) {
					t.Fatalf("retry after the deadline and the margin: %s %v", out, err)
				}
				close(release)
				if r := <-first; !errors.Is(r.err, idem.ErrLeaseLost) && !k.ran(r.out, r.err) {
					t.Fatalf("the stuck invocation: %s %v", r.out, r.err)
				}
			})
		}
	}
}
