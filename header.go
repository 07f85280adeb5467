package idem

// KeyHeader is the name of the header that carries an idempotency key, after the IETF draft
// "The Idempotency-Key HTTP Header Field" and Stripe's API. The HTTP middleware reads it, the
// retrying client sets it, and gRPC metadata carries it in lower case.
const KeyHeader = "Idempotency-Key"
