package idemlambda_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemlambda"
)

func TestProxyOptions(t *testing.T) {
	t.Parallel()
	eng := newEngine(t, idem.Options{})
	h := func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{}, nil
	}
	for _, opt := range []idemlambda.ProxyOptions{
		{},
		{Runner: eng, Methods: []string{"post"}},
		{Runner: eng, Methods: []string{""}},
	} {
		if _, err := idemlambda.WrapAPIGateway(opt, h); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%+v: %v", opt, err)
		}
	}
	if _, err := idemlambda.WrapHTTPAPI(idemlambda.ProxyOptions{Runner: eng}, nil); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("nil handler: %v", err)
	}
}

// Methods that are not processed, and requests without a key, go to the handler untouched,
// every time.
func TestProxyPassThrough(t *testing.T) {
	t.Parallel()
	o := &orders{}
	h, err := idemlambda.WrapAPIGateway(idemlambda.ProxyOptions{Runner: newEngine(t, idem.Options{}), Logger: quiet}, o.v1)
	if err != nil {
		t.Fatal(err)
	}
	get := v1Request("tenant-a", "k-1", "")
	get.HTTPMethod = "GET"
	noKey := v1Request("tenant-a", "", "{}")
	for _, req := range []events.APIGatewayProxyRequest{get, get, noKey, noKey} {
		resp, err := h(context.Background(), req)
		if err != nil || resp.StatusCode != 201 || resp.Headers[idemhttp.ReplayedHeader] != "" {
			t.Fatalf("%s: %+v %v", req.HTTPMethod, resp, err)
		}
	}
	if r := o.runs.Load(); r != 4 {
		t.Fatalf("handler ran %d times, want 4", r)
	}
}

// ScopeHeader is matched in any case and keeps callers apart; without it and without an
// authorizer, Unscoped lets requests share one key space.
func TestProxyScopeHeaderAndUnscoped(t *testing.T) {
	t.Parallel()
	o := &orders{}
	eng := newEngine(t, idem.Options{})
	h, err := idemlambda.WrapHTTPAPI(idemlambda.ProxyOptions{Runner: eng, ScopeHeader: "X-Api-Key", Logger: quiet}, o.v2)
	if err != nil {
		t.Fatal(err)
	}
	req := func(apiKey string) events.APIGatewayV2HTTPRequest {
		r := v2Request("", "k-1", "{}")
		if apiKey != "" {
			r.Headers["x-api-key"] = apiKey
		}
		return r
	}
	for _, c := range []struct {
		apiKey   string
		status   int
		replayed bool
	}{{"key-a", 201, false}, {"key-b", 201, false}, {"key-a", 201, true}, {"", 400, false}} {
		resp, err := h(context.Background(), req(c.apiKey))
		if err != nil || resp.StatusCode != c.status || (resp.Headers[idemhttp.ReplayedHeader] == "true") != c.replayed {
			t.Fatalf("api key %q: %+v %v", c.apiKey, resp, err)
		}
	}
	open, err := idemlambda.WrapHTTPAPI(idemlambda.ProxyOptions{Runner: eng, Unscoped: true, Logger: quiet}, o.v2)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"", "true"} {
		resp, err := open(context.Background(), v2Request("", "k-open", "{}"))
		if err != nil || resp.StatusCode != 201 || resp.Headers[idemhttp.ReplayedHeader] != want {
			t.Fatalf("unscoped %d: %+v %v", i, resp, err)
		}
	}
	if r := o.runs.Load(); r != 3 {
		t.Fatalf("handler ran %d times, want 3", r)
	}
}
