package redisstream

import "github.com/idemkit/idem/consumer"

// WithBeforeAck returns opt with a hook called before each ack; true stops the worker at
// once, acking nothing more, as if the process died at that instant. For tests only.
// Kill stops w at once, acking nothing more, as if the process died. For tests only.
func Kill(w *Worker) { w.dead.Store(true) }

func WithBeforeAck(opt Options, f func(consumer.Result) bool) Options {
	opt.beforeAck = f
	return opt
}
