package idemlambda

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem/consumer"
)

// BodyKey returns a consumer.KeyFunc that takes the key from a message's JSON body, for the
// event source handlers (EventBridgeHandler, KinesisHandler, DynamoDBHandler): the value at
// each path, with the syntax and the encoding of Options.KeyPath (Options.KeyPaths for several
// paths), so two messages share a key only if they hold the same JSON value at every path. A
// message whose body is not JSON, or holds nothing at one of the paths, gets an error: the
// consumer rejects it (consumer.OutcomeRejected), and the source handler reports it as not done.
// BodyKey fails with an *idem.OptionError (matching idem.ErrInvalidInput) if a path is
// invalid or none is given.
func BodyKey(paths ...string) (consumer.KeyFunc, error) {
	if len(paths) == 0 {
		return nil, optionError("BodyKey paths", "are empty: give at least one")
	}
	parsed := make([][]string, len(paths))
	for i, p := range paths {
		var err error
		if parsed[i], err = parsePath(p); err != nil || p == "" {
			return nil, optionError(fmt.Sprintf("BodyKey path %q", p), "%v", cmpErr(err, "is empty"))
		}
	}
	return func(m *consumer.Message) (string, error) {
		doc, err := decode(m.Body)
		if err != nil {
			return "", fmt.Errorf("%w: the body is not JSON: %v", ErrMissingKey, err)
		}
		vals := make([]any, len(parsed))
		for i, p := range parsed {
			v, ok := lookup(doc, p)
			if !ok || empty(v) {
				return "", fmt.Errorf("%w at %q", ErrMissingKey, paths[i])
			}
			vals[i] = v
		}
		if len(vals) == 1 {
			return encodeKey(vals[0]), nil
		}
		return encodeTuple(vals), nil
	}, nil
}

// errNilConsumer is the error of a source handler made without a consumer.
func errNilConsumer(fn string) error {
	return optionError(fn+" consumer", "is nil")
}

// handleOne handles one message and returns its Result; a panic in the handler fails the
// message only (the engine has released its claim).
func handleOne(ctx context.Context, c *consumer.Consumer, m *consumer.Message) (r consumer.Result) {
	defer func() {
		if p := recover(); p != nil {
			r = consumer.Result{Outcome: consumer.OutcomeFailed, Err: fmt.Errorf("idemlambda: the handler panicked: %v", p)}
		}
	}()
	return c.Handle(ctx, m)
}

// ErrNotDone is matched (errors.Is) by the error an asynchronously invoked source handler
// (EventBridgeHandler, S3Handler) returns when a record was not done with, so that Lambda
// retries the event: the record's Result.Err is joined to it.
var ErrNotDone = errors.New("idemlambda: event not done")

// notDone is the error for a message that was not acked.
func notDone(what string, r consumer.Result) error {
	return fmt.Errorf("%w: %s: %s: %w", ErrNotDone, what, r.Outcome, cmpNil(r.Err))
}

func cmpNil(err error) error {
	if err == nil {
		return errors.New("no error given")
	}
	return err
}

// arnName is the name at the end of a resource ARN's "kind/name" part
// ("arn:aws:kinesis:eu-west-1:1:stream/orders" → "orders"; a DynamoDB stream ARN
// "…:table/orders/stream/2024-…" → "orders").
func arnName(arn, kind string) string {
	_, rest, ok := strings.Cut(arn, ":"+kind+"/")
	if !ok {
		return arn
	}
	name, _, _ := strings.Cut(rest, "/")
	return name
}
