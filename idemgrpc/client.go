package idemgrpc

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/internal/retry"
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
	sched   retry.Schedule
	methods map[string]bool
	rand    func(n int64) int64
	sleep   func(ctx context.Context, d time.Duration) error
}

// UnaryClientInterceptor returns the client interceptor: each call gets one idempotency key,
// sent on every attempt, and is retried while retrying is safe and useful. It fails with an
// *idem.OptionError (matching idem.ErrInvalidInput) naming the field if an option is out of
// range.
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
	sched := retry.Schedule{MaxAttempts: opt.MaxAttempts, BaseDelay: opt.BaseDelay, MaxDelay: opt.MaxDelay,
		MaxElapsed: opt.MaxElapsed, AttemptTimeout: opt.AttemptTimeout}
	if err := sched.Init("idemgrpc", "ClientOptions"); err != nil {
		return nil, err
	}
	opt.MaxAttempts, opt.BaseDelay, opt.MaxDelay, opt.MaxElapsed = sched.MaxAttempts, sched.BaseDelay, sched.MaxDelay, sched.MaxElapsed
	if opt.NewKey == nil {
		opt.NewKey = idemclient.NewKey
	}
	c := &client{opt: opt, sched: sched, rand: rand.Int64N, sleep: retry.Sleep}
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
	win := c.sched.Window(ctx, time.Now())
	for attempt := 1; ; attempt++ {
		err := c.attempt(ctx, method, req, reply, cc, invoker, opts)
		if err == nil {
			return nil
		}
		wait, again := c.retryable(ctx, err)
		if !again || attempt >= c.opt.MaxAttempts {
			return err
		}
		delay, ok := win.Pause(time.Now(), c.sched.Backoff(attempt, c.rand), wait)
		if !ok {
			return err
		}
		if serr := c.sleep(ctx, delay); serr != nil {
			return err
		}
	}
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
