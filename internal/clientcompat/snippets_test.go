package clientcompat_test

// The Go snippets of docs/clients.md: each region between a "snippet NAME" line and an "end
// snippet" line is quoted there verbatim (TestDocQuotesSnippets keeps the two equal).

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemkit/idem/idemclient"
)

// snippet idemclient

// newIdemClient returns an *http.Client for an API behind idem. Every POST and PATCH gets one
// Idempotency-Key, kept on every attempt; network errors, timeouts, 5xx, 408, 429 and idem's
// 409 (the original still running, with Retry-After) are retried; 400 and 422 are final.
func newIdemClient(attemptTimeout, budget time.Duration) (*http.Client, error) {
	return idemclient.NewClient(idemclient.Options{
		AttemptTimeout: attemptTimeout, // one attempt, body included; a timeout is retried
		MaxElapsed:     budget,         // the whole intent, pauses included
	})
}

// end snippet

// snippet retryablehttp

// newRetryableClient returns a go-retryablehttp client that agrees with idem's answers. The
// default policy retries network errors, 429 and 5xx but 501, and treats 409 as final; idem's
// 409 means "the original is still running, come back after Retry-After", so it is retried
// too. DefaultBackoff obeys Retry-After only on 429 and 503, and without a cap.
func newRetryableClient(attemptTimeout time.Duration) *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.RetryMax = 8
	c.RetryWaitMin = 100 * time.Millisecond
	c.RetryWaitMax = 2 * time.Second      // also caps a Retry-After
	c.HTTPClient.Timeout = attemptTimeout // per attempt; a timed-out attempt is retried
	c.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if ctx.Err() == nil && err == nil && resp.StatusCode == http.StatusConflict && resp.Header.Get("Retry-After") != "" {
			return true, nil
		}
		return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	}
	c.Backoff = func(lo, hi time.Duration, attempt int, resp *http.Response) time.Duration {
		if resp != nil {
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
				return min(time.Duration(s)*time.Second, hi)
			}
		}
		return retryablehttp.LinearJitterBackoff(lo, hi, attempt, resp)
	}
	return c
}

// postIntent sends one intent. The key is set once, on the request, so every attempt that
// go-retryablehttp makes carries it.
func postIntent(c *retryablehttp.Client, url, key string, body []byte) (*http.Response, error) {
	req, err := retryablehttp.NewRequest(http.MethodPost, url, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key) // e.g. idemclient.NewKey(), stored with the intent
	return c.Do(req)
}

// end snippet
