package dynamostore

import (
	"io"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// LocalClient returns a DynamoDB client for DynamoDB Local (or another emulator) at endpoint,
// such as "http://127.0.0.1:8000": region us-east-1, static dummy credentials, response
// checksum validation off (DynamoDB Local does not send the CRC32 the SDK checks), and an
// HTTP client that keeps request bodies open until the transport is done with them (against a
// fast local server the SDK could otherwise close a body early and fail with "use of closed
// network connection", aws-sdk-go-v2 issue #2737).
//
// transport carries the requests; nil means a fresh http.Transport that keeps up to 256 idle
// connections, so many goroutines reuse connections instead of opening new ones. optFns
// adjust the client options last (retryer, API options, …).
//
// It is for tests, demos and development; for AWS, build the client from config.LoadDefaultConfig.
func LocalClient(endpoint string, transport http.RoundTripper, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	if transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 256
		t.IdleConnTimeout = 30 * time.Second
		transport = t
	}
	return dynamodb.New(dynamodb.Options{
		Region:                          "us-east-1",
		BaseEndpoint:                    aws.String(endpoint),
		Credentials:                     credentials.NewStaticCredentialsProvider("local", "local", ""),
		DisableValidateResponseChecksum: true,
		HTTPClient:                      keepBodyClient{&http.Client{Transport: transport}},
	}, optFns...)
}

// keepBodyClient hands the transport a request body whose Close does nothing, so a body closed
// by the SDK while the transport still writes it cannot tear down the connection.
type keepBodyClient struct{ c *http.Client }

func (k keepBodyClient) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = io.NopCloser(r.Body)
	}
	return k.c.Do(r)
}
