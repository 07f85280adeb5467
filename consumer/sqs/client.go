package sqs

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// ConfigOptions configure Config. The zero value gives a configuration for AWS in us-east-1
// with credentials that must then be set; for a local SQS/SNS server set Endpoint, and the
// static test credentials are filled in.
type ConfigOptions struct {
	// Endpoint is the base URL of the SQS and SNS service, such as http://127.0.0.1:4566 for a
	// local server. Default "": the AWS endpoint of Region.
	Endpoint string
	// Region is the AWS region. Default "us-east-1".
	Region string
	// AccessKeyID and SecretAccessKey are static credentials. Default: "test" and "test" when
	// Endpoint is set (a local server accepts any); none otherwise (set Credentials on the
	// returned aws.Config, or load it with the SDK's config.LoadDefaultConfig instead and wrap
	// its HTTP client with WrapHTTPClient).
	AccessKeyID, SecretAccessKey string
	// HTTPClient sends the requests. It is always wrapped with WrapHTTPClient. Default: the
	// SDK's default client.
	HTTPClient aws.HTTPClient
}

// Config returns an aws.Config for sqs.NewFromConfig and sns.NewFromConfig, with static
// credentials, the region, the endpoint and an HTTP client wrapped by WrapHTTPClient. It reads
// no environment variable and no file.
func Config(opt ConfigOptions) aws.Config {
	cfg := aws.Config{Region: cmp.Or(opt.Region, "us-east-1")}
	if opt.Endpoint != "" {
		cfg.BaseEndpoint = aws.String(opt.Endpoint)
		opt.AccessKeyID = cmp.Or(opt.AccessKeyID, "test")
		opt.SecretAccessKey = cmp.Or(opt.SecretAccessKey, "test")
	}
	if opt.AccessKeyID != "" || opt.SecretAccessKey != "" {
		cfg.Credentials = aws.NewCredentialsCache(
			credentials.NewStaticCredentialsProvider(opt.AccessKeyID, opt.SecretAccessKey, ""))
	}
	var c aws.HTTPClient = opt.HTTPClient
	if c == nil {
		c = awshttp.NewBuildableClient()
	}
	cfg.HTTPClient = WrapHTTPClient(c)
	return cfg
}

// WrapHTTPClient returns an HTTP client for the AWS SDK that hands the transport its own copy
// of each request body.
//
// The SDK closes the request body as soon as the response headers arrive, to free the stream.
// net/http may still be reading that body at that moment (after the declared length it reads
// once more to check that nothing follows). Against a fast server, such as a local SQS, the read
// then fails, the connection is torn down and the response body read fails with "use of closed
// network connection" (aws-sdk-go-v2 issue #2737). With its own copy of the body the transport
// is never disturbed. SQS and SNS bodies are small (at most 1 MiB), so the copy is cheap.
func WrapHTTPClient(c aws.HTTPClient) aws.HTTPClient {
	if w, ok := c.(ownBodyClient); ok {
		return w
	}
	return ownBodyClient{c}
}

type ownBodyClient struct{ next aws.HTTPClient }

func (c ownBodyClient) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.next.Do(req)
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, fmt.Errorf("consumer/sqs: read request body: %w", err)
	}
	r := req.Clone(req.Context())
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	r.ContentLength = int64(len(b))
	return c.next.Do(r)
}
