// Package sqs consumes Amazon SQS queues, and SNS topics fanned out to them, so that the effect
// of each business event happens once although SQS delivers every message at least once. It
// offers a long-polling [Worker] and a Lambda adapter, [LambdaHandler], over one [Handler] type.
//
// # Why duplicates come, and what the key is
//
// A visibility timeout that runs out while the work still runs, a consumer that did the work
// and then failed to delete, a producer that retried a publish that had succeeded, a DLQ
// redrive: each delivers a message again. SNS→SQS fan-out chains two at-least-once hops, and
// every delivery gets its own SQS message id: the same order fanned out to two queues, or
// published twice, arrives with different [Message.MessageID] values and one order id. So the
// idempotency key must come from the business fact in [Message.Body] (the order id, the
// transaction id, a producer's idempotency key), never from a transport id; the SNS envelope's
// MessageId is no better, as a producer's retry gets a new one. Make the handler idempotent
// with the idem engine, keyed on that fact:
//
//	h := func(ctx context.Context, m *sqs.Message) error {
//		var o Order
//		if err := json.Unmarshal(m.Body, &o); err != nil {
//			return err
//		}
//		_, err := engine.Do(ctx, "billing/order/"+o.ID, idem.Fingerprint(m.Body),
//			func(ctx context.Context) (idem.Response, error) { return idem.Response{}, charge(ctx, o) })
//		return err
//	}
//
// # The Worker
//
// [Worker.Run] long-polls the queue, asking for at most as many messages as it has free handler
// slots ([WorkerOptions.Concurrency]), so that no message waits hidden while its visibility
// timeout runs. While a handler runs the Worker extends the message's visibility
// (ChangeMessageVisibility every [WorkerOptions.ExtendEvery]), so a slow effect is not handed
// to another consumer. Then:
//
//   - the handler returned nil (the effect ran now, or the event was a duplicate): the message
//     is deleted;
//   - the error matches idem.ErrInFlight (another consumer runs the effect for this key now):
//     the message is hidden for [WorkerOptions.InFlightDelay] and comes back, to find the
//     effect done (a duplicate) or, if that consumer died, its lease expired and the claim free;
//   - any other error: the message is left for redelivery (after [WorkerOptions.RetryDelay] if
//     set), and after the queue's maxReceiveCount SQS moves it to the dead-letter queue.
//
// When the context given to Run is done, the Worker stops receiving, lets the handlers under
// way finish, deletes what they finished and returns: a graceful stop loses nothing and, with
// an idempotent handler, repeats nothing.
//
// # SNS envelopes
//
// A message that came through an SNS subscription without raw message delivery is a JSON
// envelope around the published message. The Worker and the Lambda adapter take it off
// ([UnwrapSNS]): the handler sees the published payload in Body and the envelope in
// [Message.SNS], and the envelope's string attributes in [Message.Attributes]. Raw and
// enveloped deliveries of one event therefore give the handler the same Body.
//
// # Lambda
//
// [LambdaHandler] adapts a Handler to an SQS event source mapping with
// ReportBatchItemFailures: the events.SQSEventResponse lists exactly the records whose handler
// failed, so one bad record does not redeliver the batch. FIFO batches stop at the first
// failure to keep the order.
//
// # Clients and local testing
//
// [Config] builds an aws.Config for sqs.NewFromConfig and sns.NewFromConfig with static
// credentials, such as for a local SQS/SNS server; its HTTP client is wrapped by
// [WrapHTTPClient], which keeps the SDK from closing a request body that net/http still reads
// (aws-sdk-go-v2 issue #2737). This package's tests run against fauxqs, started by
// scripts/services.sh on 127.0.0.1:4566 (IDEM_SQS_ENDPOINT), and count effects in PostgreSQL.
package sqs
