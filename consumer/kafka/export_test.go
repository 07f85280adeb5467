package kafka

import "github.com/idemkit/idem/consumer"

// WithBeforeCommit returns opt with a hook called before each settled record is marked for
// commit; true stops the worker at once, committing nothing more, as if the process died at
// that instant. For tests only.
// Kill stops w at once, marking and committing nothing more, as if the process died. For
// tests only.
func Kill(w *Worker) { w.dead.Store(true); w.hurry.Store(true) }

func WithBeforeCommit(opt Options, f func(consumer.Result) bool) Options {
	opt.beforeCommit = f
	return opt
}
