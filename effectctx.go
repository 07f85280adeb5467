package idem

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// effectContext is the context an effect runs with: its caller's, cancelled as well with cause
// ErrLeaseLost when the claim is lost, and cancelled once the effect has returned.
//
// Its cancellable part (a context.WithCancelCause of the caller's) is made only when something
// needs it: a call to Done (which every context-aware callee makes), a lost lease, or a look at
// it after the effect returned. An effect that never asks pays for no cancelCtx of its own and
// adds no child to its caller's context; one that asks gets exactly what WithCancelCause gives,
// context.Cause included.
type effectContext struct {
	parent   context.Context
	inner    atomic.Pointer[context.Context]
	mu       sync.Mutex // guards making inner, cancel and finished
	cancel   context.CancelCauseFunc
	finished atomic.Bool
}

func newEffectContext(parent context.Context) *effectContext {
	return &effectContext{parent: parent}
}

// cancellable returns the cancellable part, making it on first use.
func (c *effectContext) cancellable() context.Context {
	if p := c.inner.Load(); p != nil {
		return *p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.inner.Load(); p != nil {
		return *p
	}
	ctx, cancel := context.WithCancelCause(c.parent)
	c.cancel = cancel
	if c.finished.Load() {
		cancel(nil)
	}
	c.inner.Store(&ctx)
	return ctx
}

// current returns the context to answer from: the cancellable part if it exists or must (the
// effect returned), else the caller's.
func (c *effectContext) current() context.Context {
	if p := c.inner.Load(); p != nil {
		return *p
	}
	if c.finished.Load() {
		return c.cancellable()
	}
	return c.parent
}

// Deadline implements context.Context: the caller's.
func (c *effectContext) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done implements context.Context.
func (c *effectContext) Done() <-chan struct{} { return c.cancellable().Done() }

// Err implements context.Context.
func (c *effectContext) Err() error { return c.current().Err() }

// Value implements context.Context. Once the cancellable part exists it answers, so that
// context.Cause finds its cause.
func (c *effectContext) Value(key any) any { return c.current().Value(key) }

// String names the context, for debugging.
func (c *effectContext) String() string { return "idem.effectContext" }

// lose cancels the effect's context with cause ErrLeaseLost.
func (c *effectContext) lose() {
	c.cancellable()
	c.mu.Lock()
	c.cancel(ErrLeaseLost)
	c.mu.Unlock()
}

// finish cancels the context once the effect returned (a no-op for its part never made).
func (c *effectContext) finish() {
	c.mu.Lock()
	c.finished.Store(true)
	if c.cancel != nil {
		c.cancel(nil)
	}
	c.mu.Unlock()
}
