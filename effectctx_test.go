package idem

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type ctxKey struct{}

func TestEffectContext(t *testing.T) {
	parentCause := errors.New("caller gave up")
	cases := []struct {
		name      string
		askFirst  bool // call Done before the event
		event     func(c *effectContext, cancelParent context.CancelCauseFunc)
		wantErr   error
		wantCause error
	}{
		{"lease lost, never asked", false, func(c *effectContext, _ context.CancelCauseFunc) { c.lose() }, context.Canceled, ErrLeaseLost},
		{"lease lost, asked", true, func(c *effectContext, _ context.CancelCauseFunc) { c.lose() }, context.Canceled, ErrLeaseLost},
		{"caller cancelled, never asked", false, func(_ *effectContext, cp context.CancelCauseFunc) { cp(parentCause) }, context.Canceled, parentCause},
		{"caller cancelled, asked", true, func(_ *effectContext, cp context.CancelCauseFunc) { cp(parentCause) }, context.Canceled, parentCause},
		{"finished, never asked", false, func(c *effectContext, _ context.CancelCauseFunc) { c.finish() }, context.Canceled, context.Canceled},
		{"finished, asked", true, func(c *effectContext, _ context.CancelCauseFunc) { c.finish() }, context.Canceled, context.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			deadline := time.Now().Add(time.Hour)
			parent, cancelParent := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
			defer cancelParent(nil)
			parent, cancelDeadline := context.WithDeadline(parent, deadline)
			defer cancelDeadline()
			c := newEffectContext(parent)
			if got := c.Value(ctxKey{}); got != "v" {
				t.Errorf("Value = %v, want the caller's", got)
			}
			if d, ok := c.Deadline(); !ok || !d.Equal(deadline) {
				t.Errorf("Deadline = %v %t, want the caller's", d, ok)
			}
			if c.Err() != nil || context.Cause(c) != nil {
				t.Fatalf("a fresh context is done: %v", c.Err())
			}
			var child context.Context
			if tc.askFirst {
				select {
				case <-c.Done():
					t.Fatal("Done closed early")
				default:
				}
				var stop context.CancelFunc
				child, stop = context.WithTimeout(c, time.Hour)
				defer stop()
			}
			tc.event(c, cancelParent)
			select {
			case <-c.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("Done not closed")
			}
			if !errors.Is(c.Err(), tc.wantErr) {
				t.Errorf("Err = %v, want %v", c.Err(), tc.wantErr)
			}
			if got := context.Cause(c); !errors.Is(got, tc.wantCause) {
				t.Errorf("Cause = %v, want %v", got, tc.wantCause)
			}
			if child != nil {
				select {
				case <-child.Done():
				case <-time.After(5 * time.Second):
					t.Fatal("a context derived before the event was not cancelled")
				}
				if got := context.Cause(child); !errors.Is(got, tc.wantCause) {
					t.Errorf("derived context's Cause = %v, want %v", got, tc.wantCause)
				}
			}
			if got := c.Value(ctxKey{}); got != "v" {
				t.Errorf("Value after the event = %v, want the caller's", got)
			}
		})
	}
}

// Many goroutines asking while the lease is lost: one cancellable part, no race.
func TestEffectContextConcurrent(t *testing.T) {
	for range 50 {
		c := newEffectContext(context.Background())
		var wg sync.WaitGroup
		chans := make([]<-chan struct{}, 16)
		for i := range chans {
			wg.Go(func() { chans[i] = c.Done() })
		}
		wg.Go(c.lose)
		wg.Wait()
		for i, ch := range chans {
			if ch != chans[0] {
				t.Fatalf("Done %d returned another channel", i)
			}
			<-ch
		}
		if !errors.Is(context.Cause(c), ErrLeaseLost) {
			t.Fatalf("Cause = %v", context.Cause(c))
		}
		c.finish()
	}
}
