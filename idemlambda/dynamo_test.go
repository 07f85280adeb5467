package idemlambda_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
)

// dynamoStore returns a store on a fresh DynamoDB Local table (IDEM_DYNAMODB_ENDPOINT, default
// http://127.0.0.1:8000), dropped after the test. The test is skipped without DynamoDB Local,
// or fails when IDEM_REQUIRE_SERVICES=1.
func dynamoStore(t *testing.T) *dynamostore.Store {
	t.Helper()
	st, _, _ := dynamoTable(t)
	return st
}

// dynamoTable is dynamoStore, with DynamoDB Local's endpoint and the table's name.
func dynamoTable(t *testing.T) (st *dynamostore.Store, endpoint, table string) {
	t.Helper()
	ep := testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
	client := dynamostore.LocalClient(ep, sharedTransport)
	table = fmt.Sprintf("idemlambda_%s_%08x", strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()), rand.Uint32())
	var err error
	st, err = dynamostore.New(dynamostore.Options{Client: client, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.CreateTable(ctx, dynamostore.TableOptions{}); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
			t.Errorf("DeleteTable %s: %v", table, err)
		}
	})
	return st, ep, table
}

func dynamoEngine(t *testing.T, opt idem.Options) *idem.Engine {
	t.Helper()
	opt.Logger = slog.New(slog.DiscardHandler)
	eng, err := idem.New(dynamoStore(t), opt)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

var quiet = slog.New(slog.DiscardHandler)

// v1Request is a REST API event for tenant (a Cognito user pool subject) with an
// Idempotency-Key header, in the case REST APIs keep.
func v1Request(tenant, key, body string) events.APIGatewayProxyRequest {
	r := events.APIGatewayProxyRequest{
		HTTPMethod: "POST", Path: "/orders", Resource: "/orders",
		Headers:           map[string]string{"Idempotency-Key": key, "Content-Type": "application/json"},
		MultiValueHeaders: map[string][]string{"Idempotency-Key": {key}, "Content-Type": {"application/json"}},
		Body:              body,
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID:  fmt.Sprintf("req-%d", rand.Int64()),
			Authorizer: map[string]any{"claims": map[string]any{"iss": "https://cognito-idp.example/pool", "sub": tenant}},
		},
	}
	if key == "" {
		delete(r.Headers, "Idempotency-Key")
		delete(r.MultiValueHeaders, "Idempotency-Key")
	}
	if tenant == "" {
		r.RequestContext.Authorizer = nil
	}
	return r
}

// v2Request is an HTTP API event for tenant (a JWT subject), its header names lower-cased as
// HTTP APIs deliver them.
func v2Request(tenant, key, body string) events.APIGatewayV2HTTPRequest {
	r := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /orders", RawPath: "/orders",
		Headers: map[string]string{"idempotency-key": key, "content-type": "application/json"},
		Body:    body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID: fmt.Sprintf("req-%d", rand.Int64()),
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/orders"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"iss": "https://issuer.example", "sub": tenant}},
			},
		},
	}
	if key == "" {
		delete(r.Headers, "idempotency-key")
	}
	if tenant == "" {
		r.RequestContext.Authorizer = nil
	}
	return r
}

// orders is a handler that counts its runs and answers with the run's number, so a replay is
// told from a second run.
type orders struct {
	runs  atomic.Int32
	delay time.Duration
	gate  chan struct{} // if set, each run waits for it
}

func (o *orders) run(body string) (int, string, map[string]string) {
	n := o.runs.Add(1)
	if o.gate != nil {
		<-o.gate
	}
	time.Sleep(o.delay)
	return 201, fmt.Sprintf(`{"order":"o_%d","for":%q}`, n, body), map[string]string{"Content-Type": "application/json"}
}

func (o *orders) v1(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
	st, body, h := o.run(req.Body)
	return events.APIGatewayProxyResponse{StatusCode: st, Headers: h, MultiValueHeaders: map[string][]string{"Set-Cookie": {"a=1", "b=2"}}, Body: body}, nil
}

func (o *orders) v2(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	st, body, h := o.run(req.Body)
	return events.APIGatewayV2HTTPResponse{StatusCode: st, Headers: h, Cookies: []string{"a=1"}, Body: body}, nil
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// proxyKind runs the same scenarios against both event kinds: send is one invocation through
// aws-lambda-go's handler adapter, returning the response's status, headers and body.
type proxyKind struct {
	name string
	wrap func(t *testing.T, opt idemlambda.ProxyOptions, o *orders) any
	req  func(tenant, key, body string) any
}

type sent struct {
	Status  int               `json:"statusCode"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Base64  bool              `json:"isBase64Encoded"`
	Multi   map[string][]string
	Cookies []string `json:"cookies"`
	raw     []byte
}

func send(t *testing.T, h any, req any) (sent, error) {
	t.Helper()
	out, err := invoke(t, h, mustJSON(t, req))
	if err != nil {
		return sent{}, err
	}
	var s sent
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("response %s: %v", out, err)
	}
	var m struct {
		Multi map[string][]string `json:"multiValueHeaders"`
	}
	_ = json.Unmarshal(out, &m)
	s.Multi, s.raw = m.Multi, out
	return s, nil
}

var proxyKinds = []proxyKind{
	{
		name: "rest-v1",
		wrap: func(t *testing.T, opt idemlambda.ProxyOptions, o *orders) any {
			h, err := idemlambda.WrapAPIGateway(opt, o.v1)
			if err != nil {
				t.Fatal(err)
			}
			return h
		},
		req: func(tenant, key, body string) any { return v1Request(tenant, key, body) },
	},
	{
		name: "http-v2",
		wrap: func(t *testing.T, opt idemlambda.ProxyOptions, o *orders) any {
			h, err := idemlambda.WrapHTTPAPI(opt, o.v2)
			if err != nil {
				t.Fatal(err)
			}
			return h
		},
		req: func(tenant, key, body string) any { return v2Request(tenant, key, body) },
	},
}

// Many deliveries of one request at once, from many goroutines sharing a DynamoDB table: the
// handler runs once; every other delivery gets its response, with the same status, headers,
// cookies and body, marked as replayed.
func TestDynamoProxyConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	for _, k := range proxyKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			o := &orders{delay: 50 * time.Millisecond}
			h := k.wrap(t, idemlambda.ProxyOptions{Runner: dynamoEngine(t, idem.Options{Wait: 20 * time.Second, PollInterval: 5 * time.Millisecond}), Logger: quiet}, o)
			const n = 16
			outs := make([]sent, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { outs[i], errs[i] = send(t, h, k.req("tenant-a", "key-1", `{"sku":"tea"}`)) })
			}
			wg.Wait()
			if r := o.runs.Load(); r != 1 {
				t.Fatalf("handler ran %d times, want 1", r)
			}
			first := -1
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("delivery %d: %v", i, errs[i])
				}
				if outs[i].Headers[idemhttp.ReplayedHeader] == "" {
					if first >= 0 {
						t.Fatalf("deliveries %d and %d both executed", first, i)
					}
					first = i
				}
			}
			if first < 0 {
				t.Fatal("no delivery executed")
			}
			want := outs[first]
			for i, s := range outs {
				if s.Status != 201 || s.Body != want.Body || s.Headers["Content-Type"] != "application/json" ||
					!slicesEqual(s.Cookies, want.Cookies) || !slicesEqual(s.Multi["Set-Cookie"], want.Multi["Set-Cookie"]) {
					t.Fatalf("delivery %d got %s, the executed one %s", i, s.raw, want.raw)
				}
				if i != first && s.Headers[idemhttp.ReplayedHeader] != "true" {
					t.Fatalf("replay %d is not marked: %s", i, s.raw)
				}
			}
			if !strings.Contains(want.Body, `"order":"o_1"`) {
				t.Fatalf("response %s", want.raw)
			}
		})
	}
}

func slicesEqual(a, b []string) bool {
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

// Two tenants with the same key never meet: each runs its own request and gets its own
// response; a tenant's replay is its own.
func TestDynamoProxyTenantsApart(t *testing.T) {
	t.Parallel()
	for _, k := range proxyKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			o := &orders{}
			h := k.wrap(t, idemlambda.ProxyOptions{Runner: dynamoEngine(t, idem.Options{}), Logger: quiet}, o)
			a1, err1 := send(t, h, k.req("tenant-a", "shared-key", `{"sku":"tea"}`))
			b1, err2 := send(t, h, k.req("tenant-b", "shared-key", `{"sku":"coffee"}`))
			a2, err3 := send(t, h, k.req("tenant-a", "shared-key", `{"sku":"tea"}`))
			if err := errors.Join(err1, err2, err3); err != nil {
				t.Fatal(err)
			}
			if a1.Status != 201 || b1.Status != 201 || !strings.Contains(b1.Body, "coffee") || a2.Body != a1.Body || a2.Headers[idemhttp.ReplayedHeader] != "true" {
				t.Fatalf("tenant a: %s, tenant b: %s, tenant a again: %s", a1.raw, b1.raw, a2.raw)
			}
			if r := o.runs.Load(); r != 2 {
				t.Fatalf("handler ran %d times, want 2 (one per tenant)", r)
			}
		})
	}
}

// Refusals: a key reused with another body (422), a duplicate while the first runs (409 with
// Retry-After), a missing key where required and a malformed one (400), and a caller with no
// scope (400). None runs the handler.
func TestDynamoProxyRefusals(t *testing.T) {
	t.Parallel()
	for _, k := range proxyKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			o := &orders{gate: make(chan struct{})}
			// A heartbeat of a second makes the engine's estimate for a duplicate exactly 1s.
			h := k.wrap(t, idemlambda.ProxyOptions{Runner: dynamoEngine(t, idem.Options{Heartbeat: time.Second}), RequireKey: true, Logger: quiet}, o)
			done := make(chan sent, 1)
			go func() {
				s, err := send(t, h, k.req("tenant-a", "k-1", `{"sku":"tea"}`))
				if err != nil {
					t.Error(err)
				}
				done <- s
			}()
			for o.runs.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			problem := func(s sent, err error, status int, typ string) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				if s.Status != status || s.Headers["Content-Type"] != idemhttp.ProblemContentType || !strings.Contains(s.Body, `"type":"`+typ+`"`) {
					t.Fatalf("want %d %s, got %s", status, typ, s.raw)
				}
				// Only a refusal to be retried later says when.
				if _, ok := s.Headers["Retry-After"]; ok != (status == 409) {
					t.Fatalf("%d with Retry-After %v: %s", status, ok, s.raw)
				}
			}
			s, err := send(t, h, k.req("tenant-a", "k-1", `{"sku":"tea"}`))
			problem(s, err, 409, idemhttp.ProblemInFlight)
			// The engine's estimate in whole seconds, rounded up: 1.
			if n, err := strconv.Atoi(s.Headers["Retry-After"]); err != nil || n != 1 {
				t.Fatalf("409 with Retry-After %q: %s", s.Headers["Retry-After"], s.raw)
			}
			s, err = send(t, h, k.req("tenant-a", "k-1", `{"sku":"rum"}`))
			problem(s, err, 422, idemhttp.ProblemMismatch)
			close(o.gate)
			if first := <-done; first.Status != 201 {
				t.Fatalf("first: %s", first.raw)
			}
			s, err = send(t, h, k.req("tenant-a", "k-1", `{"sku":"rum"}`))
			problem(s, err, 422, idemhttp.ProblemMismatch)
			s, err = send(t, h, k.req("tenant-a", "", `{"sku":"tea"}`))
			problem(s, err, 400, idemhttp.ProblemMissingKey)
			s, err = send(t, h, k.req("tenant-a", " ", `{"sku":"tea"}`))
			problem(s, err, 400, idemhttp.ProblemInvalidKey)
			s, err = send(t, h, k.req("tenant-a", "\"unterminated", `{"sku":"tea"}`))
			problem(s, err, 400, idemhttp.ProblemInvalidKey)
			s, err = send(t, h, k.req("", "k-2", `{"sku":"tea"}`))
			problem(s, err, 400, idemhttp.ProblemInvalidScope)
			if r := o.runs.Load(); r != 1 {
				t.Fatalf("handler ran %d times, want 1", r)
			}
		})
	}
}

// The fingerprint is of the body's bytes: a base64 body is decoded first, so the same bytes
// sent encoded or not are the same request, and an encoded body is never confused with the
// text of its encoding.
func TestDynamoProxyBase64Body(t *testing.T) {
	t.Parallel()
	enc := base64.StdEncoding.EncodeToString([]byte("\x00\x01binary"))
	v1 := func(key, body string, b64 bool) any {
		r := v1Request("tenant-a", key, body)
		r.IsBase64Encoded = b64
		return r
	}
	v2 := func(key, body string, b64 bool) any {
		r := v2Request("tenant-a", key, body)
		r.IsBase64Encoded = b64
		return r
	}
	for i, k := range proxyKinds {
		mk := []func(string, string, bool) any{v1, v2}[i]
		t.Run(k.name, func(t *testing.T) {
			t.Parallel()
			o := &orders{}
			h := k.wrap(t, idemlambda.ProxyOptions{Runner: dynamoEngine(t, idem.Options{}), Logger: quiet}, o)
			for _, step := range []struct {
				key, body string
				b64       bool
				status    int
				replayed  bool
			}{
				{"k-bin", enc, true, 201, false},
				{"k-bin", "\x00\x01binary", false, 201, true}, // the same bytes, not encoded
				{"k-bin", enc, false, 422, false},             // the text of the encoding is another body
				{"k-text", enc, false, 201, false},
				{"k-text", enc, true, 422, false},
				{"k-bad", "%%%", true, 400, false}, // not base64
			} {
				s, err := send(t, h, mk(step.key, step.body, step.b64))
				if err != nil {
					t.Fatal(err)
				}
				if s.Status != step.status || (s.Headers[idemhttp.ReplayedHeader] == "true") != step.replayed {
					t.Fatalf("%s %q base64=%v: %s", step.key, step.body, step.b64, s.raw)
				}
			}
			if r := o.runs.Load(); r != 2 {
				t.Fatalf("handler ran %d times, want 2", r)
			}
		})
	}
}

// A response the policy releases (5xx) and an error from the handler leave the key free: the
// retry runs the handler again.
func TestDynamoProxyFailuresRelease(t *testing.T) {
	t.Parallel()
	eng := dynamoEngine(t, idem.Options{})
	calls := 0
	h, err := idemlambda.WrapHTTPAPI(idemlambda.ProxyOptions{Runner: eng, Logger: quiet}, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		calls++
		switch calls {
		case 1:
			return events.APIGatewayV2HTTPResponse{StatusCode: 503, Body: "busy"}, nil
		case 2:
			return events.APIGatewayV2HTTPResponse{}, errors.New("the database went away")
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "ok"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	req := v2Request("tenant-a", "k-1", "{}")
	if s, err := send(t, h, req); err != nil || s.Status != 503 {
		t.Fatalf("first: %+v %v", s, err)
	}
	if _, err := send(t, h, req); err == nil || !strings.Contains(err.Error(), "database went away") {
		t.Fatalf("second: the handler's error was lost: %v", err)
	}
	for range 2 {
		if s, err := send(t, h, req); err != nil || s.Status != 200 || s.Body != "ok" {
			t.Fatalf("retry: %+v %v", s, err)
		}
	}
	if calls != 3 {
		t.Fatalf("handler ran %d times, want 3", calls)
	}
}

// The generic wrapper on DynamoDB: concurrent deliveries run the handler once; a duplicate while
// the first runs gets an error matching idem.ErrInFlight, another payload one matching
// idem.ErrMismatch (Powertools' IdempotencyAlreadyInProgressError and
// IdempotencyValidationError), through aws-lambda-go's handler adapter.
func TestDynamoWrap(t *testing.T) {
	t.Parallel()
	var c charger
	h, err := idemlambda.Wrap(idemlambda.Options{
		Runner:  dynamoEngine(t, idem.Options{Wait: 20 * time.Second, PollInterval: 5 * time.Millisecond}),
		KeyPath: "body.order_id", FingerprintPath: "body",
	}, c.handle)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	outs := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			outs[i], errs[i] = invoke(t, h, apiEvent(fmt.Sprintf("req-%d", i), `{"order_id":"o-7","amount":7}`))
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || !bytes.Equal(outs[i], outs[0]) {
			t.Fatalf("delivery %d: %s %v; delivery 0: %s", i, outs[i], errs[i], outs[0])
		}
	}
	if r := c.runs.Load(); r != 1 {
		t.Fatalf("handler ran %d times, want 1", r)
	}
	if _, err := invoke(t, h, apiEvent("req-x", `{"order_id":"o-7","amount":8}`)); !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("another amount: %v", err)
	}

	gate, started := make(chan struct{}), make(chan struct{}, 1)
	slow, err := idemlambda.Wrap(idemlambda.Options{Runner: dynamoEngine(t, idem.Options{}), KeyPath: "id"},
		func(ctx context.Context, ev map[string]any) (string, error) {
			started <- struct{}{}
			<-gate
			return "done", nil
		})
	if err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() { _, err := invoke(t, slow, []byte(`{"id":"evt-1"}`)); first <- err }()
	<-started
	_, err = invoke(t, slow, []byte(`{"id":"evt-1"}`))
	var inflight *idem.InFlightError
	if !errors.As(err, &inflight) || !errors.Is(err, idem.ErrInFlight) || inflight.RetryAfter <= 0 {
		t.Fatalf("duplicate while the first runs: %v", err)
	}
	close(gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// A store that cannot be reached, or is closed: the handler does not run; a proxy event gets
// 503 with Retry-After, the generic wrapper an error matching idem.ErrStoreUnavailable.
func TestDynamoStoreDown(t *testing.T) {
	t.Parallel()
	unreachable, err := dynamostore.New(dynamostore.Options{Client: dynamostore.LocalClient("http://127.0.0.1:1", sharedTransport, func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }), Table: "none"})
	if err != nil {
		t.Fatal(err)
	}
	closed := dynamoStore(t)
	closed.Close()
	for name, st := range map[string]idem.Store{"unreachable": unreachable, "closed": closed} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eng, err := idem.New(st, idem.Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range proxyKinds {
				o := &orders{}
				h := k.wrap(t, idemlambda.ProxyOptions{Runner: eng, Logger: quiet}, o)
				s, err := send(t, h, k.req("tenant-a", "k-1", "{}"))
				if err != nil || s.Status != 503 || s.Headers["Retry-After"] == "" || !strings.Contains(s.Body, idemhttp.ProblemStoreUnavailable) {
					t.Fatalf("%s: %s %v", k.name, s.raw, err)
				}
				if o.runs.Load() != 0 {
					t.Fatalf("%s: the handler ran with the store down", k.name)
				}
			}
			var c charger
			h, _ := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "body.order_id"}, c.handle)
			if _, err := invoke(t, h, apiEvent("r", `{"order_id":"o-1"}`)); !errors.Is(err, idem.ErrStoreUnavailable) {
				t.Fatalf("generic: %v", err)
			}
			if c.runs.Load() != 0 {
				t.Fatal("generic: the handler ran with the store down")
			}
		})
	}
}

// REST API events: a Lambda authorizer's principalId scopes the key (two callers, one key: two
// runs), and the query string of an event that carries only single-valued parameters is part
// of the request (the same key with another query is refused as another request).
func TestDynamoProxyV1PrincipalAndQuery(t *testing.T) {
	t.Parallel()
	o := &orders{}
	h := proxyKinds[0].wrap(t, idemlambda.ProxyOptions{Runner: dynamoEngine(t, idem.Options{}), Logger: quiet}, o)
	ev := func(principal, amount string) any {
		r := v1Request("unused", "v1-key", `{"sku":"tea"}`)
		r.RequestContext.Authorizer = map[string]any{"principalId": principal}
		r.QueryStringParameters = map[string]string{"amount": amount}
		return r
	}
	a, err1 := send(t, h, ev("alice", "1"))
	b, err2 := send(t, h, ev("bob", "1"))
	a2, err3 := send(t, h, ev("alice", "2"))
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	if a.Status != 201 || b.Status != 201 || b.Headers[idemhttp.ReplayedHeader] == "true" || o.runs.Load() != 2 {
		t.Fatalf("alice: %s, bob: %s, %d runs; want one run each", a.raw, b.raw, o.runs.Load())
	}
	if a2.Status != 422 || o.runs.Load() != 2 {
		t.Fatalf("alice's key with another query: %s; want 422", a2.raw)
	}
}
