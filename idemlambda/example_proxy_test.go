package idemlambda_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/store/memstore"
)

// A REST API (payload format 1.0) behind a Cognito user pool authorizer: a client retries its
// POST with the same Idempotency-Key, the order is created once, and the retry gets the first
// response, marked as replayed. In a function, pass h to lambda.Start.
func ExampleWrapAPIGateway() {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		panic(err)
	}
	create := func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		fmt.Println("creating the order")
		return events.APIGatewayProxyResponse{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"order":"o_1"}`}, nil
	}
	h, err := idemlambda.WrapAPIGateway(idemlambda.ProxyOptions{Runner: eng}, create)
	if err != nil {
		panic(err)
	}
	req := events.APIGatewayProxyRequest{
		HTTPMethod: "POST",
		Path:       "/orders",
		Headers:    map[string]string{"Idempotency-Key": "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		Body:       `{"sku":"tea","qty":2}`,
		RequestContext: events.APIGatewayProxyRequestContext{
			Authorizer: map[string]any{"claims": map[string]any{"iss": "https://cognito-idp.eu-west-1.amazonaws.com/pool", "sub": "user-42"}},
		},
	}
	for range 2 {
		resp, err := h(context.Background(), req)
		fmt.Println(resp.StatusCode, resp.Body, resp.Headers["Idempotent-Replayed"], err)
	}
	// Output:
	// creating the order
	// 201 {"order":"o_1"}  <nil>
	// 201 {"order":"o_1"} true <nil>
}

// An HTTP API (payload format 2.0) with a JWT authorizer: the same key with another body is a
// mistake in the client, answered with 422 and no second effect.
func ExampleWrapHTTPAPI() {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		panic(err)
	}
	create := func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		fmt.Println("creating the order")
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"order":"o_1"}`}, nil
	}
	h, err := idemlambda.WrapHTTPAPI(idemlambda.ProxyOptions{Runner: eng}, create)
	if err != nil {
		panic(err)
	}
	req := func(body string) events.APIGatewayV2HTTPRequest {
		return events.APIGatewayV2HTTPRequest{
			RawPath: "/orders",
			Headers: map[string]string{"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"},
			Body:    body,
			RequestContext: events.APIGatewayV2HTTPRequestContext{
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/orders"},
				Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
					JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"iss": "https://issuer.example", "sub": "user-42"}},
				},
			},
		}
	}
	for _, body := range []string{`{"sku":"tea","qty":2}`, `{"sku":"tea","qty":2}`, `{"sku":"tea","qty":3}`} {
		resp, err := h(context.Background(), req(body))
		fmt.Println(resp.StatusCode, resp.Headers["Idempotent-Replayed"], strings.TrimSpace(resp.Body), err)
	}
	// Output:
	// creating the order
	// 201  {"order":"o_1"} <nil>
	// 201 true {"order":"o_1"} <nil>
	// 422  {"type":"https://idemkit.dev/problems/mismatch","title":"This idempotency key was used with a different request","status":422} <nil>
}
