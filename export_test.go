package idem

// WaitingKeys returns how many keys the engine's in-process waiters map holds, for tests that
// check it does not grow without bound.
func WaitingKeys(e *Engine) int {
	e.wake.mu.Lock()
	defer e.wake.mu.Unlock()
	return len(e.wake.m)
}
