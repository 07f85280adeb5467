package sqs

import "github.com/idemkit/idem/consumer"

// WithBeforeDelete returns opt with a hook called before each delete; true skips the delete, as
// if the process died at that instant. For tests only.
func WithBeforeDelete(opt WorkerOptions, f func(consumer.Result) bool) WorkerOptions {
	opt.beforeDelete = f
	return opt
}
