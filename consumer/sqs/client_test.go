package sqs_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/idemkit/idem/consumer/sqs"
)

// fragileBody is a request body like the SDK's: once closed, reads fail.
type fragileBody struct {
	r      io.Reader
	closed atomic.Bool
}

func (b *fragileBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errors.New("read after close")
	}
	return b.r.Read(p)
}

func (b *fragileBody) Close() error { b.closed.Store(true); return nil }

// closeFirst is an HTTP client under which the caller's body is closed before the transport
// reads it: the worst case of the SDK closing the body while net/http still reads it.
type closeFirst struct{ orig *fragileBody }

func (c closeFirst) Do(r *http.Request) (*http.Response, error) {
	c.orig.Close()
	return http.DefaultClient.Do(r)
}

func TestWrapHTTPClientOwnsTheBody(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	payload := strings.Repeat("sqs ", 10000)

	send := func(wrap bool) (string, error) {
		body := &fragileBody{r: strings.NewReader(payload)}
		req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
		req.ContentLength = int64(len(payload))
		var c aws.HTTPClient = closeFirst{body}
		if wrap {
			c = sqs.WrapHTTPClient(c)
		}
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		return string(got), err
	}
	if _, err := send(false); err == nil {
		t.Fatal("unwrapped: the early close did not break the request; the test does not bite")
	}
	got, err := send(true)
	if err != nil || got != payload {
		t.Fatalf("wrapped: %d bytes back, err %v", len(got), err)
	}
	// Requests without a body pass through; wrapping twice wraps once.
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	resp, err := sqs.WrapHTTPClient(sqs.WrapHTTPClient(http.DefaultClient)).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func TestConfig(t *testing.T) {
	t.Parallel()
	cfg := sqs.Config(sqs.ConfigOptions{Endpoint: "http://127.0.0.1:4566"})
	if cfg.Region != "us-east-1" || aws.ToString(cfg.BaseEndpoint) != "http://127.0.0.1:4566" || cfg.Credentials == nil {
		t.Errorf("local config %+v", cfg)
	}
	creds, err := cfg.Credentials.Retrieve(t.Context())
	if err != nil || creds.AccessKeyID != "test" {
		t.Errorf("credentials %+v %v", creds, err)
	}
	aws := sqs.Config(sqs.ConfigOptions{Region: "eu-west-1"})
	if aws.Region != "eu-west-1" || aws.BaseEndpoint != nil || aws.Credentials != nil || aws.HTTPClient == nil {
		t.Errorf("AWS config %+v", aws)
	}
}
