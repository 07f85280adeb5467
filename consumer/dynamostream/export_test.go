package dynamostream

// WithBeforeAck returns opt with a hook called before each checkpoint: when it returns true
// the worker behaves as if killed at that instant (the conformance suite's crash).
func WithBeforeAck(opt Options, f func() bool) Options {
	opt.beforeAck = f
	return opt
}
