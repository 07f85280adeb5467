package idemlambda_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
)

type recorder struct {
	mu     sync.Mutex
	events []idemlambda.Event
}

func (r *recorder) add(ev idemlambda.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) outcomes() []idemlambda.Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []idemlambda.Outcome
	for _, ev := range r.events {
		out = append(out, ev.Outcome)
	}
	return out
}

// TestWrapOnEvent: Options.OnEvent gets one Event per invocation, with the outcome in the words
// idemhttp uses for the same thing and the storage key.
func TestWrapOnEvent(t *testing.T) {
	t.Parallel()
	var rec recorder
	type order struct {
		ID   string `json:"id"`
		Fail string `json:"fail,omitempty"`
	}
	boom := errors.New("boom")
	h, err := idemlambda.Wrap(idemlambda.Options{Runner: newEngine(t, idem.Options{}), KeyPath: "id", FingerprintPath: ".", Name: "fn",
		Logger: quiet, OnEvent: rec.add},
		func(_ context.Context, o order) (string, error) {
			switch o.Fail {
			case "error":
				return "", boom
			case "uncertain":
				return "", idem.Uncertain(boom)
			}
			return "done " + o.ID, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, o := range []order{{ID: "1"}, {ID: "1"}, {ID: "1", Fail: "other"}, {ID: "2", Fail: "error"}, {ID: "3", Fail: "uncertain"}, {}} {
		_, _ = h(ctx, o)
	}
	want := []idemlambda.Outcome{idemlambda.OutcomeExecuted, idemlambda.OutcomeReplay, idemlambda.OutcomeMismatch,
		idemlambda.OutcomeReleased, idemlambda.OutcomeUncertain, idemlambda.OutcomeBypass}
	if got := rec.outcomes(); len(got) != len(want) || !equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if ev := rec.events[0]; ev.Key == "" || ev.Start.IsZero() || ev.Duration <= 0 || ev.Err != nil {
		t.Errorf("executed: %+v", ev)
	}
	if ev := rec.events[3]; !errors.Is(ev.Err, boom) {
		t.Errorf("released: err %v, want the handler's", ev.Err)
	}
	if ev := rec.events[2]; !errors.Is(ev.Err, idem.ErrMismatch) {
		t.Errorf("mismatch: err %v", ev.Err)
	}
}

// TestProxyOnEvent: ProxyOptions.OnEvent gets one Event per request, with the status answered.
func TestProxyOnEvent(t *testing.T) {
	t.Parallel()
	var rec recorder
	h, err := idemlambda.WrapAPIGateway(idemlambda.ProxyOptions{Runner: newEngine(t, idem.Options{}), Unscoped: true, Logger: quiet, OnEvent: rec.add},
		func(_ context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
			if req.Body == "fail" {
				return events.APIGatewayProxyResponse{StatusCode: 503}, nil
			}
			return events.APIGatewayProxyResponse{StatusCode: 201, Body: "ok"}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	req := func(method, key, body string) events.APIGatewayProxyRequest {
		r := events.APIGatewayProxyRequest{HTTPMethod: method, Path: "/orders", Body: body}
		if key != "" {
			r.Headers = map[string]string{idem.KeyHeader: key}
		}
		return r
	}
	ctx := context.Background()
	for _, r := range []events.APIGatewayProxyRequest{
		req("POST", "k1", "a"), req("POST", "k1", "a"), req("POST", "k1", "b"), req("POST", "k2", "fail"),
		req("GET", "", ""), req("POST", "bad\x01key", "a"),
	} {
		if _, err := h(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	want := []idemlambda.Outcome{idemlambda.OutcomeExecuted, idemlambda.OutcomeReplay, idemlambda.OutcomeMismatch,
		idemlambda.OutcomeReleased, idemlambda.OutcomeBypass, idemlambda.OutcomeInvalidKey}
	if got := rec.outcomes(); !equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, status := range []int{201, 201, 422, 503, 201, 400} {
		if ev := rec.events[i]; ev.Status != status || ev.Start.IsZero() {
			t.Errorf("event %d: %+v, want status %d", i, ev, status)
		}
	}
	if rec.events[0].Key == "" || rec.events[4].Key != "" {
		t.Errorf("keys %q, %q: want the first's, none for the bypass", rec.events[0].Key, rec.events[4].Key)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
