package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/dynamostore"
)

// throttler sits in front of DynamoDB Local and answers some requests with
// ProvisionedThroughputExceededException, the way DynamoDB does when a table or partition is
// over its capacity. before is the share of requests refused without reaching the server;
// after is the share that reach it (and are applied) but whose answer is replaced by the
// error, as when a response is lost: the SDK's retry then meets its own write.
type throttler struct {
	base          http.RoundTripper
	before, after float64
	mu            sync.Mutex
	rng           *rand.Rand
	nBefore       atomic.Int64
	nAfter        atomic.Int64
	nTotal        atomic.Int64
}

func newThrottler(before, after float64) *throttler {
	return &throttler{before: before, after: after, rng: rand.New(rand.NewPCG(rand.Uint64(), 1))}
}

func (f *throttler) wrap(base http.RoundTripper) http.RoundTripper { f.base = base; return f }

func (f *throttler) RoundTrip(r *http.Request) (*http.Response, error) {
	f.nTotal.Add(1)
	f.mu.Lock()
	x := f.rng.Float64()
	f.mu.Unlock()
	switch {
	case x < f.before:
		f.nBefore.Add(1)
		if r.Body != nil {
			_, _ = io.Copy(io.Discard, r.Body)
			_ = r.Body.Close()
		}
		return throttled(r), nil
	case x < f.before+f.after:
		resp, err := f.base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		f.nAfter.Add(1)
		return throttled(r), nil
	}
	return f.base.RoundTrip(r)
}

func throttled(r *http.Request) *http.Response {
	body := `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"injected by the test"}`
	return &http.Response{
		StatusCode:    400,
		Status:        "400 Bad Request",
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Requestid": {"injected"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       r,
	}
}

// TestThrottlingIsBounded: a table that throttles every request makes each call fail after
// the SDK retryer's bounded attempts (4 for DynamoDB) and backoff, with an error that matches
// idem.ErrStoreUnavailable and unwraps to the throttling exception; nothing is written.
func TestThrottlingIsBounded(t *testing.T) {
	t.Parallel()
	f := newThrottler(1, 0)
	b := setup(t, dynamostore.Options{}, f.wrap)
	clean := setup(t, dynamostore.Options{Table: b.table})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	start := time.Now()
	_, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: time.Now(), Lease: time.Second, TTL: time.Hour})
	took := time.Since(start)
	var pte *types.ProvisionedThroughputExceededException
	if !errors.Is(err, idem.ErrStoreUnavailable) || !errors.As(err, &pte) {
		t.Fatalf("Reserve against a throttling table: %v, want ErrStoreUnavailable wrapping ProvisionedThroughputExceededException", err)
	}
	if n := len(b.calls.take()); n != 4 {
		t.Errorf("Reserve made %d attempts, want the DynamoDB retryer's 4", n)
	}
	if took > 15*time.Second {
		t.Errorf("Reserve took %v to give up", took)
	}
	t.Logf("gave up after 4 attempts in %v: %v", took.Round(time.Millisecond), err)
	if _, err := clean.store.Get(ctx, "k"); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Get after refused Reserve: %v, want ErrNotFound", err)
	}
	// Through the engine, a throttled store fails closed: no effect runs.
	eng, err := idem.New(b.store, idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	_, err = eng.Do(ctx, "k", fp, func(context.Context) (idem.Response, error) { ran = true; return idem.Response{}, nil })
	if ran || !errors.Is(err, idem.ErrStoreUnavailable) {
		t.Errorf("engine over a throttling store: ran=%v err=%v, want no effect and ErrStoreUnavailable", ran, err)
	}
}

// TestThrottlingUnderLoad runs concurrent engine calls for many keys while 20% of requests
// are refused and 10% are applied but answered with throttling. The SDK's retries must never
// produce a second execution nor a wrong replay, every failure must be a clean error, and
// every call must return within a bound.
func TestThrottlingUnderLoad(t *testing.T) {
	t.Parallel()
	f := newThrottler(0.2, 0.1)
	b := setup(t, dynamostore.Options{}, f.wrap)
	clean := setup(t, dynamostore.Options{Table: b.table})
	const keys, callers = 24, 8
	now := time.Now()
	eng, err := idem.New(b.store, idem.Options{Now: func() time.Time { return now }, StoreTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	var runs [keys]atomic.Int32
	var outcomes sync.Map // "executed", "replayed", error kinds → count
	bump := func(k string) {
		v, _ := outcomes.LoadOrStore(k, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
	}
	var slowest atomic.Int64
	var wg sync.WaitGroup
	for k := range keys {
		key := fmt.Sprintf("load-%d", k)
		fp := idem.Fingerprint([]byte(key))
		for range callers {
			wg.Go(func() {
				start := time.Now()
				res, err := eng.Do(context.Background(), key, fp, func(context.Context) (idem.Response, error) {
					runs[k].Add(1)
					time.Sleep(5 * time.Millisecond)
					return idem.Response{Status: 200, Body: []byte(key)}, nil
				})
				if d := time.Since(start); d.Nanoseconds() > slowest.Load() {
					slowest.Store(d.Nanoseconds())
				}
				switch {
				case err == nil && string(res.Response.Body) != key:
					t.Errorf("%s: result body %q", key, res.Response.Body)
				case err == nil && res.Replayed:
					bump("replayed")
				case err == nil:
					bump("executed")
				case errors.Is(err, idem.ErrInFlight):
					bump("in flight")
				case errors.Is(err, idem.ErrLeaseLost):
					bump("complete applied, answer lost") // the write landed; the retry met it
				case errors.Is(err, idem.ErrStoreUnavailable):
					bump("store unavailable")
				default:
					t.Errorf("%s: unexpected error %v", key, err)
				}
			})
		}
	}
	wg.Wait()
	for k := range keys {
		if n := runs[k].Load(); n > 1 {
			t.Errorf("load-%d: effect ran %d times", k, n)
		}
	}
	if f.nBefore.Load() == 0 || f.nAfter.Load() == 0 {
		t.Fatalf("no faults injected (%d before, %d after)", f.nBefore.Load(), f.nAfter.Load())
	}
	if d := time.Duration(slowest.Load()); d > 30*time.Second {
		t.Errorf("slowest call took %v", d)
	}
	// Every stored record is the right one; an executed key whose answers were lost is either
	// completed or left in flight, never completed with another body.
	completed := 0
	for k := range keys {
		key := fmt.Sprintf("load-%d", k)
		rec, err := clean.store.Get(context.Background(), key)
		if errors.Is(err, idem.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.State == idem.StateCompleted {
			completed++
			if string(rec.Response.Body) != key || runs[k].Load() != 1 {
				t.Errorf("%s: completed with %q after %d runs", key, rec.Response.Body, runs[k].Load())
			}
		}
	}
	var summary []string
	outcomes.Range(func(k, v any) bool {
		summary = append(summary, fmt.Sprintf("%s=%d", k, v.(*atomic.Int32).Load()))
		return true
	})
	t.Logf("%d requests, %d refused, %d applied but answered throttled; %d/%d keys completed; outcomes %v; slowest call %v",
		f.nTotal.Load(), f.nBefore.Load(), f.nAfter.Load(), completed, keys, summary, time.Duration(slowest.Load()).Round(time.Millisecond))
	if completed == 0 {
		t.Error("no key completed under 30% faults")
	}
}

// TestLostClaimAnswerNeverDoubleClaims: many goroutines race for one key while answers are
// lost. A claim whose answer was lost is seen by its own retry as someone else's claim, so it
// is reported as not claimed: at most one caller ever holds the key.
func TestLostClaimAnswerNeverDoubleClaims(t *testing.T) {
	t.Parallel()
	f := newThrottler(0, 0.3)
	b := setup(t, dynamostore.Options{})
	bf := setup(t, dynamostore.Options{Table: b.table}, f.wrap)
	fp := idem.Fingerprint([]byte("x"))
	base := time.Now()
	for round := range 8 {
		key := fmt.Sprintf("race-%d", round)
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				res, err := bf.store.Reserve(context.Background(), idem.ReserveRequest{Key: key, Fingerprint: fp, Now: base, Lease: time.Minute, TTL: time.Hour})
				switch {
				case err != nil && !errors.Is(err, idem.ErrStoreUnavailable):
					t.Errorf("Reserve: %v", err)
				case err == nil && res.Claimed:
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n > 1 {
			t.Fatalf("round %d: %d callers claimed one key", round, n)
		}
		rec, err := b.store.Get(context.Background(), key)
		if err == nil && rec.State != idem.StateInProgress {
			t.Fatalf("round %d: record %+v", round, rec)
		}
	}
	if f.nAfter.Load() == 0 {
		t.Fatal("no answers were lost")
	}
}
