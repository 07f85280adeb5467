// Package sqs adapts the broker-neutral consumer package to Amazon SQS, to SNS topics fanned
// out to SQS queues, and to Lambda functions fed by SQS, so that the effect of each business
// event happens once although SQS delivers every message at least once. It offers a
// long-polling [Worker] and a Lambda adapter, [LambdaHandler], both over a *consumer.Consumer.
//
// # The key is the business fact
//
// A visibility timeout that runs out while the work still runs, a consumer that did the work
// and then failed to delete, a producer that retried a publish that had succeeded, a DLQ
// redrive: each delivers a message again. SNS→SQS fan-out chains two at-least-once hops, and
// every delivery gets its own SQS message id: the same order fanned out to two queues, or
// published twice, arrives with different message ids and one order id. So the consumer's key
// function derives the key from the body (the order id, the transaction id, a producer's
// idempotency key), never from the message id; the SNS envelope's MessageId is no better, as a
// producer's retry gets a new one.
//
//	c, err := consumer.New(consumer.Options{Runner: engine, Scope: "billing", Key: orderID}, charge)
//	w, err := sqs.NewWorker(sqsClient, c, sqs.WorkerOptions{QueueURL: url})
//	err = w.Run(ctx) // until ctx is done, then a graceful stop
//
// Two services that each act on an event (billing, shipping), each on its own queue fed by one
// topic, use their own consumer.Options.Scope and each run their effect once; one service that
// reads two queues fed by one topic uses one scope and runs it once in all.
//
// # The Worker
//
// [Worker.Run] long-polls the queue, asking for at most as many messages as it has free slots
// ([WorkerOptions.Concurrency]), so that no message waits hidden while its visibility timeout
// runs. While the effect runs the consumer calls the message's Extend hook, which moves its
// visibility timeout forward (ChangeMessageVisibility every [WorkerOptions.ExtendEvery]), so a
// slow effect is not handed to another consumer. Then [Settle] acts on the Result:
//
//   - OutcomeExecuted or OutcomeReplay: the message is deleted;
//   - OutcomeInFlight (another consumer runs the effect for this key now): the message is hidden for
//     Result.RetryAfter and comes back, to find the effect done (a replay) or, if that
//     consumer died, its lease run out and the claim free;
//   - OutcomeFailed: left for redelivery, after consumer.Options.RetryDelay if set, otherwise when its
//     visibility timeout ends;
//   - OutcomeRejected: left too, since SQS cannot dead-letter a message at once: after the queue's
//     maxReceiveCount its redrive policy moves it to the dead-letter queue.
//
// When the context given to Run is done, the Worker stops receiving (a long poll under way is
// let finish, as an abandoned one can still take messages off the queue), lets the handlers
// finish, deletes what they finished and returns: a graceful stop loses nothing and repeats
// nothing. A crash between an effect and its delete only makes the message come back, to be
// found a replay.
//
// # SNS envelopes
//
// A message that came through an SNS subscription without raw message delivery is a JSON
// envelope around the published message. [Message] and [LambdaMessage] take it off
// ([UnwrapSNS]): the consumer sees the published payload as Body, the topic ARN as Subject and
// the envelope's string attributes as Header. Raw and enveloped deliveries of one event
// therefore have the same Body, and the same key and fingerprint.
//
// # Lambda
//
// [LambdaHandler] adapts a consumer to an SQS event source mapping with
// ReportBatchItemFailures: the events.SQSEventResponse lists exactly the records that are not
// done with (OutcomeInFlight, OutcomeFailed, OutcomeRejected), so one bad record does not redeliver the batch. FIFO
// batches stop at the first such record, to keep the group's order.
//
// # Clients and local testing
//
// [Config] builds an aws.Config for sqs.NewFromConfig and sns.NewFromConfig with static
// credentials, such as for a local SQS/SNS server; its HTTP client is wrapped by
// [WrapHTTPClient], which keeps the SDK from closing a request body that net/http still reads
// (aws-sdk-go-v2 issue #2737). The tests run against fauxqs, which scripts/services.sh starts
// on 127.0.0.1:4566 (IDEM_SQS_ENDPOINT), pass consumer/consumertest both with SQS messages and
// with SNS envelopes, and count effects in PostgreSQL.
package sqs
