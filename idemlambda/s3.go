package idemlambda

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"

	"github.com/aws/aws-lambda-go/events"

	"github.com/idemkit/idem/consumer"
)

// S3Message converts a record of an S3 event notification into the message a consumer
// handles: its Body is the record as JSON (as S3 sent it), its Subject the bucket's name, its
// ID the object's sequencer, and its Header "bucket", "key" (URL-decoded), "version-id",
// "sequencer", "event-name" and "etag". Use S3Key as the consumer's key function.
func S3Message(r events.S3EventRecord) *consumer.Message {
	body, _ := json.Marshal(r) // plain values only: cannot fail
	o := r.S3.Object
	return &consumer.Message{
		Body:    body,
		ID:      o.Sequencer,
		Subject: r.S3.Bucket.Name,
		Header: map[string][]string{
			"bucket":     {r.S3.Bucket.Name},
			"key":        {objectKey(o)},
			"version-id": {o.VersionID},
			"sequencer":  {o.Sequencer},
			"event-name": {r.EventName},
			"etag":       {o.ETag},
		},
	}
}

// objectKey is the object's key, URL-decoded (S3 sends it URL-encoded, a space as '+').
func objectKey(o events.S3Object) string {
	if o.URLDecodedKey != "" {
		return o.URLDecodedKey
	}
	if k, err := url.QueryUnescape(o.Key); err == nil {
		return k
	}
	return o.Key
}

// S3Key is the key function for messages made by S3Message (S3Handler's): the fact is the
// object's bucket, key, version id and sequencer. S3 delivers a notification at least once,
// and a duplicate carries the same four; two writes of one key are two facts (in a versioned
// bucket their version ids differ, and in any bucket their sequencers do). A message without a
// bucket, a key, or both a version id and a sequencer gets an error, so the consumer rejects it.
func S3Key(m *consumer.Message) (string, error) {
	get := func(name string) string {
		if v := m.Header[name]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	bucket, key, version, seq := get("bucket"), get("key"), get("version-id"), get("sequencer")
	if bucket == "" || key == "" || (version == "" && seq == "") {
		return "", fmt.Errorf("%w: an S3 record needs a bucket, a key and a version id or sequencer", ErrMissingKey)
	}
	return encodeTuple([]any{bucket, key, version, seq}), nil
}

// S3Handler returns a Lambda function handler for S3 event notifications sent to the function
// (pass it to lambda.Start). Each record is converted with S3Message and handled by c, whose key
// function is S3Key (or one of the caller's over the same headers).
//
// S3 invokes the function asynchronously, and Lambda retries an invocation that returns an
// error. So the handler handles every record and returns nil when each is done with (OutcomeExecuted
// or OutcomeReplay), and otherwise an error that matches ErrNotDone and joins each failed record's
// error: Lambda's retry sends the whole event again, the records done before are Duplicates
// (their effect is not run again), and only the others run. An event without records (the
// s3:TestEvent S3 sends when a notification is configured) is done with.
func S3Handler(c *consumer.Consumer) (func(ctx context.Context, ev events.S3Event) error, error) {
	if c == nil {
		return nil, errNilConsumer("S3Handler")
	}
	return func(ctx context.Context, ev events.S3Event) error {
		var errs []error
		for _, rec := range ev.Records {
			m := S3Message(rec)
			if r := handleOne(ctx, c, m); !r.Outcome.Ack() {
				errs = append(errs, notDone(fmt.Sprintf("S3 %s s3://%s/%s", rec.EventName, m.Subject, objectKey(rec.S3.Object)), r))
			}
		}
		return errors.Join(errs...)
	}, nil
}
