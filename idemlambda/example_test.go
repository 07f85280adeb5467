package idemlambda_test

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/store/memstore"
)

// An API Gateway request delivered twice, each time with its own request id: the order is
// charged once and the second delivery gets the first response. In a function, pass h to
// lambda.Start.
func ExampleWrap() {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		panic(err)
	}
	charge := func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		fmt.Println("charging for request", req.RequestContext.RequestID)
		return events.APIGatewayProxyResponse{StatusCode: 201, Body: `{"charge":"ch_1"}`}, nil
	}
	h, err := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: "body.order_id", FingerprintPath: "body"}, charge)
	if err != nil {
		panic(err)
	}
	for _, requestID := range []string{"req-1", "req-2"} {
		resp, err := h(context.Background(), events.APIGatewayProxyRequest{
			Body:           `{"order_id":"o-1001","amount":1000}`,
			RequestContext: events.APIGatewayProxyRequestContext{RequestID: requestID},
		})
		fmt.Println(resp.StatusCode, resp.Body, err)
	}
	// Output:
	// charging for request req-1
	// 201 {"charge":"ch_1"} <nil>
	// 201 {"charge":"ch_1"} <nil>
}
