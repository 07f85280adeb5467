package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
)

// Two engines over one store stand for two processes: the waiter learns of the result by
// polling the store.
func TestWaitAcrossProcesses(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	a, _ := idem.New(st, idem.Options{})
	bEng, _ := idem.New(st, idem.Options{Wait: 5 * time.Second, PollInterval: 5 * time.Millisecond})
	started, finish := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	go func() {
		_, _ = a.Do(context.Background(), "x", fp1, func(context.Context) (idem.Response, error) {
			runs.Add(1)
			close(started)
			<-finish
			return idem.Response{Status: 200, Body: []byte("from a")}, nil
		})
	}()
	<-started
	time.AfterFunc(50*time.Millisecond, func() { close(finish) })
	res, err := bEng.Do(context.Background(), "x", fp1, effect(&runs, 200, "from b"))
	if err != nil || !res.Replayed || string(res.Response.Body) != "from a" {
		t.Fatalf("waiter: %+v, %v", res, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("runs = %d", runs.Load())
	}
}

func TestWaitGivesUpWithInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{Wait: 30 * time.Millisecond, Now: time.Now})
	hold := make(chan struct{})
	defer close(hold)
	started := make(chan struct{})
	go func() {
		_, _ = b.eng.Do(context.Background(), "slow", fp1, func(context.Context) (idem.Response, error) {
			close(started)
			<-hold
			return idem.Response{Status: 200}, nil
		})
	}()
	<-started
	begin := time.Now()
	_, err := b.eng.Do(context.Background(), "slow", fp1, effect(new(atomic.Int32), 200, ""))
	var ife *idem.InFlightError
	if !errors.As(err, &ife) || !errors.Is(err, idem.ErrInFlight) {
		t.Fatalf("err = %v, want *InFlightError", err)
	}
	if ife.RetryAfter < time.Second {
		t.Errorf("RetryAfter = %v", ife.RetryAfter)
	}
	if d := time.Since(begin); d < 30*time.Millisecond || d > 2*time.Second {
		t.Errorf("waited %v, want about 30ms", d)
	}
}

// Waiters on an effect run by another process leave nothing behind in this one.
func TestWaitersDoNotLeak(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	holder, _ := idem.New(st, idem.Options{Logger: quiet})
	waiter, _ := idem.New(st, idem.Options{Logger: quiet, Wait: 10 * time.Second, PollInterval: time.Millisecond})
	for round := range 5 {
		key := fmt.Sprintf("remote-%d", round)
		started, finish := make(chan struct{}), make(chan struct{})
		go func() {
			_, _ = holder.Do(context.Background(), key, fp1, func(context.Context) (idem.Response, error) {
				close(started)
				<-finish
				return idem.Response{Status: 201, Body: []byte(key)}, nil
			})
		}()
		<-started
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				res, err := waiter.Do(context.Background(), key, fp1, effect(new(atomic.Int32), 500, ""))
				if err != nil || !res.Replayed || string(res.Response.Body) != key {
					t.Errorf("waiter: %+v, %v", res, err)
				}
			})
		}
		time.AfterFunc(20*time.Millisecond, func() { close(finish) })
		wg.Wait()
	}
	// A waiter that gives up (its context ends) leaves nothing either.
	hold, started := make(chan struct{}), make(chan struct{})
	defer close(hold)
	go func() {
		_, _ = holder.Do(context.Background(), "held", fp1, func(context.Context) (idem.Response, error) {
			close(started)
			<-hold
			return idem.Response{Status: 201}, nil
		})
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := waiter.Do(ctx, "held", fp1, effect(new(atomic.Int32), 201, "")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiter that gave up: %v", err)
	}
	if n := idem.WaitingKeys(waiter); n != 0 {
		t.Fatalf("the waiters map holds %d keys after every waiter returned, want 0", n)
	}
}
