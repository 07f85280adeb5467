package idemlambda

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemkit/idem/consumer"
)

// KinesisMessage converts a Kinesis record into the message a consumer handles: its Body is
// the record's data, its ID the record's sequence number (for logs only), its Subject the
// stream's name, and its Header "partition-key", "sequence-number", "shard-id" and "event-id".
//
// A sequence number names a place in the stream, not a fact: a producer that retries a
// PutRecord whose answer it lost writes the fact twice, under two sequence numbers. So the key
// is taken from the data (see BodyKey).
func KinesisMessage(r events.KinesisEventRecord) *consumer.Message {
	shard, _, _ := strings.Cut(r.EventID, ":")
	return &consumer.Message{
		Body:    r.Kinesis.Data,
		ID:      r.Kinesis.SequenceNumber,
		Subject: arnName(r.EventSourceArn, "stream"),
		Header: map[string][]string{
			"partition-key":   {r.Kinesis.PartitionKey},
			"sequence-number": {r.Kinesis.SequenceNumber},
			"shard-id":        {shard},
			"event-id":        {r.EventID},
		},
	}
}

// DynamoDBMessage converts a DynamoDB Streams record into the message a consumer handles. Its
// Body is the change as plain JSON, the attribute values without their type tags (a number is
// a JSON number, a set an array, binary data base64):
//
//	{"event_name": "INSERT", "keys": {…}, "new_image": {…}, "old_image": {…}}
//
// with the images the stream's view type carries. Its ID is the record's sequence number, its
// Subject the table's name, and its Header "event-name", "sequence-number" and "event-id".
//
// Each change of an item is one record in the stream, but a writer that retries a write whose
// answer it lost can make two changes of one fact. The key names the fact: the event id the
// writer put in the item (BodyKey("new_image.event_id")), or the item's key and version
// (BodyKey("keys.pk", "new_image.version")).
func DynamoDBMessage(r events.DynamoDBEventRecord) *consumer.Message {
	body, _ := json.Marshal(dynamoChange{
		EventName: r.EventName,
		Keys:      plainImage(r.Change.Keys),
		NewImage:  plainImage(r.Change.NewImage),
		OldImage:  plainImage(r.Change.OldImage),
	}) // plain values only: cannot fail
	return &consumer.Message{
		Body:    body,
		ID:      r.Change.SequenceNumber,
		Subject: arnName(r.EventSourceArn, "table"),
		Header: map[string][]string{
			"event-name":      {r.EventName},
			"sequence-number": {r.Change.SequenceNumber},
			"event-id":        {r.EventID},
		},
	}
}

// dynamoChange is the body of a message made by DynamoDBMessage.
type dynamoChange struct {
	EventName string         `json:"event_name"`
	Keys      map[string]any `json:"keys,omitempty"`
	NewImage  map[string]any `json:"new_image,omitempty"`
	OldImage  map[string]any `json:"old_image,omitempty"`
}

// plainImage is an item's attributes as plain values (nil for no attributes).
func plainImage(item map[string]events.DynamoDBAttributeValue) map[string]any {
	if len(item) == 0 {
		return nil
	}
	out := make(map[string]any, len(item))
	for k, v := range item {
		out[k] = plainValue(v)
	}
	return out
}

// plainValue is an attribute value as a plain value: strings, json.Number, bool, nil, []byte
// (base64 in JSON), slices and maps.
func plainValue(v events.DynamoDBAttributeValue) any {
	switch v.DataType() {
	case events.DataTypeString:
		return v.String()
	case events.DataTypeNumber:
		return json.Number(v.Number())
	case events.DataTypeBoolean:
		return v.Boolean()
	case events.DataTypeBinary:
		return v.Binary()
	case events.DataTypeStringSet:
		return v.StringSet()
	case events.DataTypeNumberSet:
		ns := v.NumberSet()
		out := make([]json.Number, len(ns))
		for i, n := range ns {
			out[i] = json.Number(n)
		}
		return out
	case events.DataTypeBinarySet:
		return v.BinarySet()
	case events.DataTypeList:
		l := v.List()
		out := make([]any, len(l))
		for i, e := range l {
			out[i] = plainValue(e)
		}
		return out
	case events.DataTypeMap:
		m := v.Map()
		out := make(map[string]any, len(m))
		for k, e := range m {
			out[k] = plainValue(e)
		}
		return out
	}
	return nil // NULL
}

// KinesisHandler returns a Lambda function handler for a Kinesis event source mapping with
// ReportBatchItemFailures enabled (pass it to lambda.Start). Each record is converted with
// KinesisMessage and handled by c, one at a time, in the order of the batch.
//
// A stream keeps order per shard, and Lambda's checkpoint is a sequence number: when a
// response reports failures, Lambda retries from the lowest sequence number reported (with
// BisectBatchOnFunctionError, only from there), and the records before it are done with. So
// the handling of a shard's records stops at the first record that is not done with (its
// Outcome is OutcomeInFlight, OutcomeFailed or OutcomeRejected), and the response reports it and every later
// record of that shard: none of them is handled out of order. When Lambda sends the batch
// again, from the checkpoint or bisected, a record done before is a replay (its stored
// result, the effect not run again) and the first record not done runs. Records not started
// because ctx ended (the function is about to time out) are reported too. A panic in the
// handler fails its record only. The returned error is always nil: a failure is a record's,
// never the batch's.
//
// A rejected record (no key, a key reused for another fact, the handler's consumer.Reject)
// blocks its shard like a failure until the event source mapping's MaximumRetryAttempts or
// MaximumRecordAgeInSeconds gives it up to the on-failure destination: set them, or a poison
// record holds the shard for the stream's retention.
func KinesisHandler(c *consumer.Consumer) (func(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error), error) {
	if c == nil {
		return nil, errNilConsumer("KinesisHandler")
	}
	return func(ctx context.Context, ev events.KinesisEvent) (events.KinesisEventResponse, error) {
		failed := handleShards(ctx, c, len(ev.Records),
			func(i int) string { s, _, _ := strings.Cut(ev.Records[i].EventID, ":"); return s },
			func(i int) *consumer.Message { return KinesisMessage(ev.Records[i]) })
		resp := events.KinesisEventResponse{BatchItemFailures: []events.KinesisBatchItemFailure{}}
		for _, i := range failed {
			resp.BatchItemFailures = append(resp.BatchItemFailures,
				events.KinesisBatchItemFailure{ItemIdentifier: ev.Records[i].Kinesis.SequenceNumber})
		}
		return resp, nil
	}, nil
}

// DynamoDBHandler returns a Lambda function handler for a DynamoDB Streams event source mapping
// with ReportBatchItemFailures enabled (pass it to lambda.Start). Each record is converted with
// DynamoDBMessage and handled by c, one at a time, in order; the handling stops at the first
// record not done with, and the response reports it and every later record, by sequence
// number, exactly as KinesisHandler does (see there). A batch holds the records of one shard.
func DynamoDBHandler(c *consumer.Consumer) (func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error), error) {
	if c == nil {
		return nil, errNilConsumer("DynamoDBHandler")
	}
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		failed := handleShards(ctx, c, len(ev.Records),
			func(int) string { return "" }, // Lambda reads each shard apart: a batch is one shard
			func(i int) *consumer.Message { return DynamoDBMessage(ev.Records[i]) })
		resp := events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{}}
		for _, i := range failed {
			resp.BatchItemFailures = append(resp.BatchItemFailures,
				events.DynamoDBBatchItemFailure{ItemIdentifier: ev.Records[i].Change.SequenceNumber})
		}
		return resp, nil
	}, nil
}

// handleShards handles n records in order, each shard's apart: a shard's handling stops at its
// first record not done with. It returns the indexes of the records not done with, in order.
func handleShards(ctx context.Context, c *consumer.Consumer, n int, shard func(int) string, msg func(int) *consumer.Message) []int {
	stopped := map[string]bool{}
	var failed []int
	for i := range n {
		s := shard(i)
		if stopped[s] || ctx.Err() != nil || !handleOne(ctx, c, msg(i)).Outcome.Ack() {
			stopped[s] = true
			failed = append(failed, i)
		}
	}
	return failed
}
