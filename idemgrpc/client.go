package idemgrpc

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem/idemclient"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ClientOptions configure the client interceptor. The zero value is a safe default for every
// field.
type ClientOptions struct {
	// Methods are the full method names ("/pkg.Service/Method") that get a key and are
	// retried; calls to other methods are sent once, untouched. Default: every unary method.
	Methods []string
	// MaxAttempts caps the attempts per call, the first included. Default 5.
	MaxAttempts int
	// BaseDelay is the backoff before the first retry; it doubles with each retry. Default 100ms.
	BaseDelay time.Duration
	// MaxDelay caps one backoff delay. Default 5s. A longer delay asked for by the server
	// (RetryInfo) is still honoured if it fits in MaxElapsed.
	MaxDelay time.Duration
	// MaxElapsed caps the total time of a call, retries included. Default 30s. The call's
	// context deadline, if earlier, wins. As in idemclient, a pause that would end too late is
	// shortened so that one more attempt starts at the last useful moment: the end of the
	// budget less AttemptTimeout (at most half the budget), or less a tenth of the budget when
	// AttemptTimeout is not set. Past that moment the interceptor gives up.
	MaxElapsed time.Duration
	// AttemptTimeout bounds each attempt; an attempt that runs out is retried (with the same
	// key) while the call's own context lasts. Default 0: attempts are bounded only by the
	// call's context.
	AttemptTimeout time.Duration
	// NewKey mints the key of a call that has none. Default idemclient.NewKey (UUIDv7).
	NewKey func() string
}

type client struct {
	opt     ClientOptions
	methods map[string]bool
	rand    func(n int64) int64
	sleep   func(ctx context.Context, d time.Duration) error
}

// UnaryClientInterceptor returns the client interceptor: each call gets one idempotency key,
// sent on every attempt, and is retried while retrying is safe and useful. It fails, naming the
// field, if an option is out of range.
//
// The key is, in order: one the caller put in the outgoing metadata (MetadataKey), one set on
// the context with idemclient.WithKey, or a new one from NewKey. A call is retried on
// Unavailable; on Aborted and ResourceExhausted only when they carry a RetryInfo (the server's
// interceptor answers an in-flight duplicate so, and the retry waits at least that long); and
// on DeadlineExceeded when an attempt ran out (AttemptTimeout, or a deadline the server or a
// proxy applied) but the call's context did not.
// Nothing else is retried. Between attempts it waits a full-jitter backoff, uniform in
// [0, min(MaxDelay, BaseDelay·2^(n-1))], or the server's delay if longer (both cut short by
// MaxElapsed). When it gives up, the last attempt's error is returned as it is, so
// status.Code sees the server's code.
func UnaryClientInterceptor(opt ClientOptions) (grpc.UnaryClientInterceptor, error) {
	opt.MaxAttempts = cmp.Or(opt.MaxAttempts, 5)
	opt.BaseDelay = cmp.Or(opt.BaseDelay, 100*time.Millisecond)
	opt.MaxDelay = cmp.Or(opt.MaxDelay, 5*time.Second)
	opt.MaxElapsed = cmp.Or(opt.MaxElapsed, 30*time.Second)
	if opt.NewKey == nil {
		opt.NewKey = idemclient.NewKey
	}
	switch {
	case opt.MaxAttempts < 1:
		return nil, fmt.Errorf("%w: ClientOptions.MaxAttempts %d is below 1", ErrOptions, opt.MaxAttempts)
	case opt.BaseDelay < 0:
		return nil, fmt.Errorf("%w: ClientOptions.BaseDelay %s is negative", ErrOptions, opt.BaseDelay)
	case opt.MaxDelay < opt.BaseDelay:
		return nil, fmt.Errorf("%w: ClientOptions.MaxDelay %s is below ClientOptions.BaseDelay %s", ErrOptions, opt.MaxDelay, opt.BaseDelay)
	case opt.MaxElapsed < 0:
		return nil, fmt.Errorf("%w: ClientOptions.MaxElapsed %s is negative", ErrOptions, opt.MaxElapsed)
	case opt.AttemptTimeout < 0:
		return nil, fmt.Errorf("%w: ClientOptions.AttemptTimeout %s is negative", ErrOptions, opt.AttemptTimeout)
	}
	c := &client{opt: opt, rand: rand.Int64N, sleep: sleepCtx}
	if opt.Methods != nil {
		c.methods = make(map[string]bool, len(opt.Methods))
		for _, m := range opt.Methods {
			c.methods[m] = true
		}
	}
	return c.intercept, nil
}

func (c *client) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if c.methods != nil && !c.methods[method] {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(MetadataKey)) == 0 {
		key, ok := idemclient.KeyFrom(ctx)
		if !ok {
			key = c.opt.NewKey()
		}
		ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, key)
	}
	start := time.Now()
	deadline := start.Add(c.opt.MaxElapsed)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	lastUseful := deadline.Add(-c.reserve(deadline.Sub(start)))
	for attempt := 1; ; attempt++ {
		err := c.attempt(ctx, method, req, reply, cc, invoker, opts)
		if err == nil {
			return nil
		}
		wait, again := c.retryable(ctx, err)
		if !again || attempt >= c.opt.MaxAttempts {
			return err
		}
		now := time.Now()
		if !now.Before(lastUseful) {
			return err
		}
		// A pause that would end past the last useful moment is cut short to it: the server's
		// delay estimates when the answer will exist, and one more look may find it early.
		delay := min(max(c.backoff(attempt), wait), lastUseful.Sub(now))
		if serr := c.sleep(ctx, delay); serr != nil {
			return err
		}
	}
}

// reserve returns the time kept at the end of a call's budget for its last attempt.
func (c *client) reserve(budget time.Duration) time.Duration {
	if c.opt.AttemptTimeout > 0 {
		return min(c.opt.AttemptTimeout, budget/2)
	}
	return budget / 10
}

func (c *client) attempt(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	if c.opt.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opt.AttemptTimeout)
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// retryable says whether an attempt's error is worth another attempt, and the least pause the
// server asked for.
func (c *client) retryable(ctx context.Context, err error) (time.Duration, bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	st := status.Convert(err)
	wait, hasInfo := retryDelay(st)
	switch st.Code() {
	case codes.Unavailable:
		return wait, true
	case codes.Aborted, codes.ResourceExhausted:
		return wait, hasInfo
	case codes.DeadlineExceeded:
		return 0, true // the call's own context is not done (checked above): an attempt's ran out
	}
	return 0, false
}

// retryDelay returns the delay of a RetryInfo detail, if st has one.
func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return max(0, min(ri.GetRetryDelay().AsDuration(), time.Hour)), true
		}
	}
	return 0, false
}

// backoff returns the full-jitter delay before retry number attempt (1 for the first retry).
func (c *client) backoff(attempt int) time.Duration {
	ceiling := c.opt.MaxDelay
	if shift := attempt - 1; shift < 32 {
		if d := c.opt.BaseDelay << shift; d > 0 && d < ceiling {
			ceiling = d
		}
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(c.rand(int64(ceiling) + 1))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
