package idemlambda_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/store/memstore"
)

func newEngine(t *testing.T, opt idem.Options) *idem.Engine {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	opt.Logger = slog.New(slog.DiscardHandler)
	eng, err := idem.New(st, opt)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// apiEvent is an API Gateway proxy event as Lambda delivers it: a new request id on every
// delivery, the order in the JSON body.
func apiEvent(requestID, body string) []byte {
	ev := events.APIGatewayProxyRequest{
		HTTPMethod:     "POST",
		Path:           "/orders",
		Body:           body,
		RequestContext: events.APIGatewayProxyRequestContext{RequestID: requestID, RequestTimeEpoch: time.Now().UnixNano()},
	}
	b, err := json.Marshal(ev)
	if err != nil {
		panic(err)
	}
	return b
}

type charger struct{ runs atomic.Int32 }

func (c *charger) handle(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
	n := c.runs.Add(1)
	time.Sleep(20 * time.Millisecond)
	return events.APIGatewayProxyResponse{
		StatusCode: 201,
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       `{"charge":"ch_` + string(rune('0'+n)) + `","request":"` + req.RequestContext.RequestID + `"}`,
	}, nil
}

// invoke runs handler through the aws-lambda-go runtime's own handler adapter, with the event
// as Lambda sends it (JSON), and returns the JSON Lambda would send back.
func invoke(t *testing.T, handler any, payload []byte) ([]byte, error) {
	t.Helper()
	return lambda.NewHandler(handler).Invoke(context.Background(), payload)
}

// Twenty deliveries of one order at once, each with its own request id: the handler runs
// once, and every delivery gets the same response bytes.
func TestDuplicateDeliveriesRunOnce(t *testing.T) {
	t.Parallel()
	var c charger
	h, err := idemlambda.Wrap(idemlambda.Options{
		Runner:  newEngine(t, idem.Options{Wait: 10 * time.Second, PollInterval: 2 * time.Millisecond}),
		KeyPath: "body.order_id", FingerprintPath: "body",
	}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	outs := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			outs[i], errs[i] = invoke(t, h, apiEvent("req-"+string(rune('a'+i)), `{"order_id":"o-1001","amount":1000}`))
		})
	}
	wg.Wait()
	if r := c.runs.Load(); r != 1 {
		t.Fatalf("handler ran %d times, want 1", r)
	}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("delivery %d: %v", i, errs[i])
		}
		if !bytes.Equal(outs[i], outs[0]) {
			t.Fatalf("delivery %d got %s, delivery 0 got %s", i, outs[i], outs[0])
		}
	}
	var resp events.APIGatewayProxyResponse
	if err := json.Unmarshal(outs[0], &resp); err != nil || resp.StatusCode != 201 || !strings.Contains(resp.Body, `"charge":"ch_1"`) {
		t.Fatalf("response %s (%v)", outs[0], err)
	}
}

func TestFingerprintPath(t *testing.T) {
	t.Parallel()
	var c charger
	eng := newEngine(t, idem.Options{})
	checked, err := idemlambda.Wrap(idemlambda.Options{Runner: eng, Name: "checked", KeyPath: "body.order_id", FingerprintPath: "body.amount"}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := invoke(t, checked, apiEvent("r1", `{"order_id":"o-1","amount":10}`)); err != nil {
		t.Fatal(err)
	}
	// Field order and spacing in the body do not matter; the amount does.
	if _, err := invoke(t, checked, apiEvent("r2", `{ "amount": 10, "order_id": "o-1" }`)); err != nil {
		t.Fatalf("same order, same amount: %v", err)
	}
	_, err = checked(context.Background(), events.APIGatewayProxyRequest{Body: `{"order_id":"o-1","amount":99}`})
	if !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("same order, another amount: %v", err)
	}
	// Without a FingerprintPath only the key counts: another amount is a duplicate.
	keyOnly, _ := idemlambda.Wrap(idemlambda.Options{Runner: eng, Name: "key-only", KeyPath: "body.order_id"}, c.handle)
	for _, body := range []string{`{"order_id":"o-2","amount":1}`, `{"order_id":"o-2","amount":2}`} {
		if _, err := keyOnly(context.Background(), events.APIGatewayProxyRequest{Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	if r := c.runs.Load(); r != 2 {
		t.Fatalf("handler ran %d times, want 2", r)
	}
}

func TestMissingKey(t *testing.T) {
	t.Parallel()
	var c charger
	eng := newEngine(t, idem.Options{})
	strict, _ := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "body.order_id", RequireKey: true}, c.handle)
	for _, body := range []string{`{"amount":1}`, `not json`, `{"order_id":null}`, ``,
		`{"order_id":""}`, `{"order_id":{}}`, `{"order_id":[]}`, `{"order_id":[null,null]}`, `{"order_id":{"a":null}}`} {
		if _, err := strict(context.Background(), events.APIGatewayProxyRequest{Body: body}); !errors.Is(err, idemlambda.ErrMissingKey) {
			t.Fatalf("body %q: %v", body, err)
		}
	}
	if r := c.runs.Load(); r != 0 {
		t.Fatalf("handler ran %d times without a key", r)
	}
	lax, _ := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "body.order_id", Logger: slog.New(slog.DiscardHandler)}, c.handle)
	// Values that carry nothing are no key: each event runs, none gets another's answer.
	bodies := []string{`{}`, `{"order_id":""}`, `{"order_id":{}}`, `{"order_id":[]}`, `{"order_id":[null,null]}`, `{"order_id":null}`}
	for _, body := range bodies {
		for range 2 {
			if _, err := lax(context.Background(), events.APIGatewayProxyRequest{Body: body}); err != nil {
				t.Fatalf("body %s: %v", body, err)
			}
		}
	}
	if r := c.runs.Load(); r != int32(2*len(bodies)) {
		t.Fatalf("handler ran %d times, want %d (no key: no protection)", r, 2*len(bodies))
	}
}

// An error from the handler releases the key: Lambda's retry runs the handler again.
func TestErrorReleases(t *testing.T) {
	t.Parallel()
	calls := 0
	h, _ := idemlambda.Wrap(idemlambda.Options{Runner: newEngine(t, idem.Options{}), KeyPath: "id"},
		func(ctx context.Context, ev map[string]any) (string, error) {
			calls++
			if calls == 1 {
				return "", errors.New("downstream timed out before sending")
			}
			return "done", nil
		})
	ev := map[string]any{"id": "evt-1"}
	if _, err := h(context.Background(), ev); err == nil {
		t.Fatal("the first error was lost")
	}
	for range 2 {
		if out, err := h(context.Background(), ev); err != nil || out != "done" {
			t.Fatalf("retry: %q %v", out, err)
		}
	}
	if calls != 2 {
		t.Fatalf("handler ran %d times, want 2", calls)
	}
}

// Paths: nested objects, array indexes, JSON inside a string, the whole event; keys that are
// numbers, objects (hashed) or too long for a storage key (hashed).
func TestKeyPaths(t *testing.T) {
	t.Parallel()
	sqs := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-1", Body: `{"detail":{"payment":{"id":42}}}`}}}
	cases := []struct {
		path  string
		event any
		other any // an event with another key
	}{
		{"Records.0.body.detail.payment.id", sqs, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-1", Body: `{"detail":{"payment":{"id":43}}}`}}}},
		{"Records.0.messageId", sqs, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m-2"}}}},
		{".", map[string]any{"a": 1, "b": []int{1, 2}}, map[string]any{"a": 2, "b": []int{1, 2}}},
		{"detail", map[string]any{"detail": map[string]any{"x": 1}}, map[string]any{"detail": map[string]any{"x": 2}}},
		{"id", map[string]any{"id": strings.Repeat("k", 600)}, map[string]any{"id": strings.Repeat("k", 601)}},
		{"flag", map[string]any{"flag": true}, map[string]any{"flag": false}},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			runs := 0
			h, err := idemlambda.Wrap(idemlambda.Options{Runner: newEngine(t, idem.Options{}), KeyPath: tc.path, RequireKey: true},
				func(ctx context.Context, ev json.RawMessage) (int, error) { runs++; return runs, nil })
			if err != nil {
				t.Fatal(err)
			}
			raw := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
			for range 2 {
				if n, err := h(context.Background(), raw(tc.event)); err != nil || n != 1 {
					t.Fatalf("event: %d %v", n, err)
				}
			}
			if n, err := h(context.Background(), raw(tc.other)); err != nil || n != 2 {
				t.Fatalf("other event: %d %v", n, err)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	eng := newEngine(t, idem.Options{})
	h := func(context.Context, string) (string, error) { return "", nil }
	for _, opt := range []idemlambda.Options{
		{KeyPath: "id"},
		{Runner: eng},
		{Runner: eng, KeyPath: "a..b"},
		{Runner: eng, KeyPath: "id", FingerprintPath: "x."},
		{Runner: eng, KeyPath: "id", Name: "a|b"},
	} {
		if _, err := idemlambda.Wrap(opt, h); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%+v: %v", opt, err)
		}
	}
	if _, err := idemlambda.Wrap[string, string](idemlambda.Options{Runner: eng, KeyPath: "id"}, nil); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("nil handler: %v", err)
	}
}

// Two functions sharing a store keep their keys apart (Options.Name), and the default name is
// the function's.
func TestNamesApart(t *testing.T) {
	eng := newEngine(t, idem.Options{})
	runs := 0
	handle := func(ctx context.Context, ev map[string]any) (int, error) { runs++; return runs, nil }
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "charge-fn")
	charge, _ := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "id"}, handle)
	refund, _ := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "id", Name: "refund-fn"}, handle)
	ev := map[string]any{"id": "evt-1"}
	for _, h := range []func(context.Context, map[string]any) (int, error){charge, refund, charge, refund} {
		if _, err := h(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 2 {
		t.Fatalf("ran %d times, want 2", runs)
	}
	if _, err := eng.Store().Get(context.Background(), "charge-fn|evt-1"); err != nil {
		t.Fatalf("the default name is not the function's: %v", err)
	}
}
