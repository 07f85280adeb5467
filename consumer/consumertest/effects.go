package consumertest

import (
	"context"
	"sync"
)

// Effects records every execution of the suite's effect, so that the suite can count them:
// exactly once means one execution per event.
type Effects interface {
	// Add records one execution of the effect of the event id. ctx is the handler's; an error
	// fails the effect (the message is redelivered).
	Add(ctx context.Context, id string) error
	// Counts returns how many times the effect of each event has run.
	Counts(ctx context.Context) (map[string]int, error)
}

// memEffects is the default Effects: a map in memory, which sees every effect because the
// suite's consumers all run in the test's process.
type memEffects struct {
	mu sync.Mutex
	n  map[string]int
}

func newMemEffects() *memEffects { return &memEffects{n: map[string]int{}} }

func (m *memEffects) Add(_ context.Context, id string) error {
	m.mu.Lock()
	m.n[id]++
	m.mu.Unlock()
	return nil
}

func (m *memEffects) Counts(context.Context) (map[string]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := make(map[string]int, len(m.n))
	for k, v := range m.n {
		c[k] = v
	}
	return c, nil
}
