package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/internal/syncbuf"
)

// A message with an Extend func but no ExtendEvery is never extended: no interval, no
// extension (not one extension after another without pause).
func TestExtendWithoutIntervalNeverCalled(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	c := newConsumer(t, b.engine, func(context.Context, *consumer.Message) ([]byte, error) {
		time.Sleep(50 * time.Millisecond)
		return nil, nil
	}, consumer.Options{})
	var extends atomic.Int64
	r := c.Handle(context.Background(), &consumer.Message{Body: []byte("order:40:a"),
		Extend: func(context.Context) error { extends.Add(1); return nil }})
	if r.Outcome != consumer.OutcomeExecuted {
		t.Fatalf("got %v %v", r.Outcome, r.Err)
	}
	if n := extends.Load(); n != 0 {
		t.Fatalf("Extend called %d times without ExtendEvery; want never", n)
	}
}

// A failed broker-side extension is logged as a warning naming the message; a successful one
// logs nothing.
func TestExtensionFailureWarns(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		var logs syncbuf.Buffer
		b := setup(t, idem.Options{})
		var extends atomic.Int64
		c := newConsumer(t, b.engine, func(context.Context, *consumer.Message) ([]byte, error) {
			// Wait for two extensions (not timed: a loaded machine may delay the timer).
			for deadline := time.Now().Add(10 * time.Second); extends.Load() < 2 && time.Now().Before(deadline); {
				time.Sleep(5 * time.Millisecond)
			}
			return nil, nil
		}, consumer.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		id := "msg-ext-ok"
		if fail {
			id = "msg-ext-fails"
		}
		r := c.Handle(context.Background(), &consumer.Message{ID: id, Body: []byte("order:41:" + id), ExtendEvery: 10 * time.Millisecond,
			Extend: func(context.Context) error {
				extends.Add(1)
				if fail {
					return errors.New("visibility change refused")
				}
				return nil
			}})
		if r.Outcome != consumer.OutcomeExecuted || extends.Load() < 2 {
			t.Fatalf("got %v %v after %d extensions", r.Outcome, r.Err, extends.Load())
		}
		warned := strings.Contains(logs.String(), "broker-side extension failed")
		if warned != fail || (fail && !strings.Contains(logs.String(), id)) {
			t.Fatalf("extensions failing %v; log:\n%s", fail, logs.String())
		}
	}
}

// Reject's error matches ErrRejected and the error it wraps, and says both.
func TestRejectWraps(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	err := consumer.Reject(boom)
	if !errors.Is(err, consumer.ErrRejected) || !errors.Is(err, boom) || err.Error() != "consumer: message rejected: boom" {
		t.Fatalf("Reject(boom): %q, matches ErrRejected %v, boom %v", err, errors.Is(err, consumer.ErrRejected), errors.Is(err, boom))
	}
	err = consumer.Reject(nil)
	if !errors.Is(err, consumer.ErrRejected) || err.Error() != consumer.ErrRejected.Error() {
		t.Fatalf("Reject(nil): %q, matches ErrRejected %v", err, errors.Is(err, consumer.ErrRejected))
	}
}

// Ack is true for executed and replayed deliveries only.
func TestOutcomeAck(t *testing.T) {
	t.Parallel()
	for o, want := range map[consumer.Outcome]bool{
		consumer.OutcomeExecuted: true, consumer.OutcomeReplay: true, consumer.OutcomeInFlight: false,
		consumer.OutcomeFailed: false, consumer.OutcomeRejected: false, "": false, "executed!": false,
	} {
		if o.Ack() != want {
			t.Errorf("%v.Ack() = %v, want %v", o, o.Ack(), want)
		}
	}
}

// A result of exactly Options.MaxResult bytes is stored and replayed; one byte more is not.
func TestResultOfMaxResultStored(t *testing.T) {
	t.Parallel()
	b := setup(t, idem.Options{})
	c := newConsumer(t, b.engine, func(_ context.Context, m *consumer.Message) ([]byte, error) {
		return bytes.Repeat([]byte("r"), len(m.Body)-len("order:42:")), nil
	}, consumer.Options{MaxResult: 10})
	for _, n := range []int{10, 11} {
		m := &consumer.Message{Body: []byte("order:42:" + strings.Repeat("x", n))}
		if n == 11 {
			m.Body = []byte("order:43:" + strings.Repeat("x", n))
		}
		if r := c.Handle(context.Background(), m); r.Outcome != consumer.OutcomeExecuted || len(r.Output) != n || r.OutputOmitted != (n > 10) {
			t.Fatalf("%d bytes, first: %+v", n, r)
		}
		r := c.Handle(context.Background(), m)
		if r.Outcome != consumer.OutcomeReplay || r.OutputOmitted != (n > 10) || (n == 10 && len(r.Output) != 10) || (n > 10 && r.Output != nil) {
			t.Fatalf("%d bytes, duplicate: %+v", n, r)
		}
	}
}
