package idemlambda_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/store/dynamostore"
)

// The tests in this file run the event source handlers (EventBridgeHandler, KinesisHandler,
// DynamoDBHandler, S3Handler) as AWS Lambda runs them: in a runtime process polling a Runtime
// API served by the test (see runtime_test.go), with DynamoDB Local as the store. The test
// plays the platform: it sends the events in their real JSON shapes (the aws-lambda-go events
// types, encoded), reads the batch item failures, and retries the way the platform documents:
// a stream batch again from the lowest sequence number reported, or bisected; an asynchronous
// event again whole.

const sourceChildEnv = "IDEMLAMBDA_TEST_SOURCE_CHILD"

// sourceConfig is what a source child is told through the environment.
type sourceConfig struct {
	Endpoint, Table, Effects string
	Source                   string   // eventbridge, kinesis, dynamodb, s3
	KeyPaths                 []string // BodyKey's paths; none for s3 (S3Key)
	LabelPath                string   // the body field that labels an effect; "" for s3 (the object key)
}

// sourceChildMain is a source child process: a Lambda function made of a consumer and one of
// the source handlers. Its handler reports each effect to the test, which may answer that it
// failed (the handler then returns an error: the effect did not happen).
func sourceChildMain() {
	var cfg sourceConfig
	if err := json.Unmarshal([]byte(os.Getenv(sourceChildEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		os.Exit(2)
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(3)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	st, err := dynamostore.New(dynamostore.Options{Client: dynamostore.LocalClient(cfg.Endpoint, nil), Table: cfg.Table})
	if err != nil {
		fail(err)
	}
	eng, err := idem.New(st, idem.Options{Logger: logger})
	if err != nil {
		fail(err)
	}
	key := idemlambda.S3Key
	if cfg.Source != "s3" {
		if key, err = idemlambda.BodyKey(cfg.KeyPaths...); err != nil {
			fail(err)
		}
	}
	c, err := consumer.New(consumer.Options{Runner: eng, Key: key, Scope: "orders", Logger: logger}, func(ctx context.Context, m *consumer.Message) ([]byte, error) {
		label := m.Header["key"]
		if cfg.LabelPath != "" {
			var doc map[string]any
			_ = json.Unmarshal(m.Body, &doc)
			for seg := range strings.SplitSeq(cfg.LabelPath, ".") {
				if next, ok := doc[seg].(map[string]any); ok {
					doc = next
				} else {
					label = []string{fmt.Sprint(doc[seg])}
				}
			}
		}
		resp, err := http.Post(cfg.Effects, "text/plain", strings.NewReader(label[0]))
		if err != nil {
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("effect %s failed: %s", label[0], resp.Status)
		}
		return []byte(label[0]), nil
	})
	if err != nil {
		fail(err)
	}
	var h any
	switch cfg.Source {
	case "eventbridge":
		h, err = idemlambda.EventBridgeHandler(c)
	case "kinesis":
		h, err = idemlambda.KinesisHandler(c)
	case "dynamodb":
		h, err = idemlambda.DynamoDBHandler(c)
	case "s3":
		h, err = idemlambda.S3Handler(c)
	default:
		err = fmt.Errorf("unknown source %q", cfg.Source)
	}
	if err != nil {
		fail(err)
	}
	lambda.Start(h)
}

// sourceEffects counts each label's effects, and fails the next attempts of the labels told to.
type sourceEffects struct {
	mu       sync.Mutex
	runs     map[string]int // effects that happened
	attempts []string       // every attempt, in order
	fail     map[string]int // attempts left to fail, per label
}

func (e *sourceEffects) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	label := string(b)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.attempts = append(e.attempts, label)
	if e.fail[label] > 0 {
		e.fail[label]--
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	e.runs[label]++
}

// failNext makes the next n attempts of label fail.
func (e *sourceEffects) failNext(label string, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fail[label] = n
}

// take returns the attempts since the last call, in order.
func (e *sourceEffects) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.attempts
	e.attempts = nil
	return a
}

// wantRuns fails the test unless each label ran exactly want[label] times.
func (e *sourceEffects) wantRuns(t *testing.T, want map[string]int) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for label, n := range want {
		if e.runs[label] != n {
			t.Errorf("%s: effect ran %d times, want %d", label, e.runs[label], n)
		}
	}
}

// sourceEnv starts a runtime process for the source, on a fresh DynamoDB Local table.
func sourceEnv(t *testing.T, cfg sourceConfig) (*environment, *sourceEffects) {
	t.Helper()
	_, ep, table := dynamoTable(t)
	fx := &sourceEffects{runs: map[string]int{}, fail: map[string]int{}}
	srv := httptest.NewServer(fx)
	t.Cleanup(srv.Close)
	cfg.Endpoint, cfg.Table, cfg.Effects = ep, table, srv.URL
	raw, _ := json.Marshal(cfg)
	return newEnvironment(t, childConfig{}, sourceChildEnv+"="+string(raw)), fx
}

// invokeJSON sends v, encoded, and returns how the invocation ended.
func invokeJSON(t *testing.T, fn *environment, v any) outcome {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	o := fn.invoke(string(raw), 20*time.Second)
	if o.timedOut || o.exited {
		t.Fatalf("invocation timed out or the runtime exited: %+v", o)
	}
	return o
}

// batchFailures is the sequence numbers a stream response reports, in order.
func batchFailures(t *testing.T, o outcome) []string {
	t.Helper()
	if o.failed {
		t.Fatalf("the batch failed as a whole: %s", o.body)
	}
	var resp events.KinesisEventResponse
	if err := json.Unmarshal(o.body, &resp); err != nil {
		t.Fatalf("response %s: %v", o.body, err)
	}
	if resp.BatchItemFailures == nil {
		t.Fatalf("response %s: batchItemFailures missing (an absent list is read as success; send [])", o.body)
	}
	var seqs []string
	for _, f := range resp.BatchItemFailures {
		seqs = append(seqs, f.ItemIdentifier)
	}
	return seqs
}

// kinesisRecord is record i of shard, with data {"order_id": order, "label": label}.
func kinesisRecord(shard string, seq int, order, label string) events.KinesisEventRecord {
	sn := fmt.Sprintf("4959%040d", seq)
	return events.KinesisEventRecord{
		AwsRegion: "eu-west-1", EventID: shard + ":" + sn, EventName: "aws:kinesis:record",
		EventSource: "aws:kinesis", EventSourceArn: "arn:aws:kinesis:eu-west-1:000000000000:stream/orders",
		EventVersion: "1.0", InvokeIdentityArn: "arn:aws:iam::000000000000:role/orders",
		Kinesis: events.KinesisRecord{
			ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: time.Unix(1700000000+int64(seq), 0)},
			Data:                        []byte(`{"order_id":"` + order + `","label":"` + label + `"}`),
			PartitionKey:                order, SequenceNumber: sn, KinesisSchemaVersion: "1.0",
		},
	}
}

// from is the records of batch from the one with sequence number seq on, as Lambda sends
// them again after a partial failure whose lowest reported sequence number is seq.
func from(t *testing.T, batch []events.KinesisEventRecord, seq string) []events.KinesisEventRecord {
	t.Helper()
	i := slices.IndexFunc(batch, func(r events.KinesisEventRecord) bool { return r.Kinesis.SequenceNumber == seq })
	if i < 0 {
		t.Fatalf("sequence number %s is not in the batch", seq)
	}
	return batch[i:]
}

func seqsOf(rs []events.KinesisEventRecord) []string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Kinesis.SequenceNumber)
	}
	return s
}

// A Kinesis batch with a failure mid-batch: the records before it run, it fails, and the
// records after it are not started (order per shard); the response reports the failed record
// and every later one. Lambda's retry from the checkpoint (the lowest sequence number reported)
// runs them, once; a retry of the whole batch and both halves of a bisected batch replay the
// records done before and run none of them again.
func TestKinesisHandlerMidBatchFailure(t *testing.T) {
	t.Parallel()
	fn, fx := sourceEnv(t, sourceConfig{Source: "kinesis", KeyPaths: []string{"order_id"}, LabelPath: "label"})
	var batch []events.KinesisEventRecord
	for i := range 6 {
		batch = append(batch, kinesisRecord("shardId-000000000000", i+1, fmt.Sprintf("o-%d", i+1), fmt.Sprintf("k%d", i+1)))
	}
	fx.failNext("k3", 1)

	got := batchFailures(t, invokeJSON(t, fn, events.KinesisEvent{Records: batch}))
	if want := seqsOf(batch[2:]); !slices.Equal(got, want) {
		t.Fatalf("first delivery reported %v, want the failed record and every later one %v", got, want)
	}
	if a := fx.take(); !slices.Equal(a, []string{"k1", "k2", "k3"}) {
		t.Fatalf("first delivery attempted %v, want k1 k2 k3 in order and nothing after the failure", a)
	}
	fx.wantRuns(t, map[string]int{"k1": 1, "k2": 1, "k3": 0, "k4": 0})

	// The platform retries from the checkpoint: the lowest sequence number reported.
	retry := from(t, batch, slices.Min(got))
	if got := batchFailures(t, invokeJSON(t, fn, events.KinesisEvent{Records: retry})); len(got) != 0 {
		t.Fatalf("retry from the checkpoint reported %v, want none", got)
	}
	if a := fx.take(); !slices.Equal(a, []string{"k3", "k4", "k5", "k6"}) {
		t.Fatalf("retry from the checkpoint attempted %v, want k3..k6 in order", a)
	}

	// The whole batch again (a retry after a function error or timeout), and each half of a
	// bisected batch: every record is a duplicate, replayed, none run again.
	for name, rs := range map[string][]events.KinesisEventRecord{"whole": batch, "first half": batch[:3], "second half": batch[3:]} {
		if got := batchFailures(t, invokeJSON(t, fn, events.KinesisEvent{Records: rs})); len(got) != 0 {
			t.Fatalf("%s again reported %v, want none", name, got)
		}
		if a := fx.take(); len(a) != 0 {
			t.Fatalf("%s again attempted %v, want nothing: the records were done before", name, a)
		}
	}
	fx.wantRuns(t, map[string]int{"k1": 1, "k2": 1, "k3": 1, "k4": 1, "k5": 1, "k6": 1})
}

// Bisect on function error: a record that fails every time is isolated by halving the batch,
// as Lambda does with BisectBatchOnFunctionError. Each half runs its records before the poison
// one once; the platform's halving converges on the poison record, and every other record's
// effect happens exactly once whatever the number of halvings.
func TestKinesisHandlerBisect(t *testing.T) {
	t.Parallel()
	fn, fx := sourceEnv(t, sourceConfig{Source: "kinesis", KeyPaths: []string{"order_id"}, LabelPath: "label"})
	var batch []events.KinesisEventRecord
	for i := range 8 {
		batch = append(batch, kinesisRecord("shardId-000000000001", i+1, fmt.Sprintf("o-%d", i+1), fmt.Sprintf("b%d", i+1)))
	}
	fx.failNext("b6", 1000) // poison: fails on every attempt
	// Lambda's bisection: a batch with a failure is split in two and each half retried, the
	// records before the reported one being done with; it stops at a one-record batch.
	var poisoned []string
	var bisect func(rs []events.KinesisEventRecord, depth int)
	bisect = func(rs []events.KinesisEventRecord, depth int) {
		if depth > 10 {
			t.Fatal("bisection did not converge")
		}
		got := batchFailures(t, invokeJSON(t, fn, events.KinesisEvent{Records: rs}))
		if len(got) == 0 {
			return
		}
		if !slices.Equal(got, seqsOf(from(t, rs, got[0]))) {
			t.Fatalf("batch %v reported %v, want its first failure and every later record", seqsOf(rs), got)
		}
		if len(rs) == 1 {
			poisoned = append(poisoned, got[0])
			return
		}
		bisect(rs[:len(rs)/2], depth+1)
		bisect(rs[len(rs)/2:], depth+1)
	}
	bisect(batch, 0)
	if want := []string{batch[5].Kinesis.SequenceNumber}; !slices.Equal(poisoned, want) {
		t.Fatalf("bisection isolated %v, want only the poison record %v", poisoned, want)
	}
	fx.wantRuns(t, map[string]int{"b1": 1, "b2": 1, "b3": 1, "b4": 1, "b5": 1, "b6": 0, "b7": 1, "b8": 1})
}

// Records of two shards in one batch: a failure stops its own shard only.
func TestKinesisHandlerShardsApart(t *testing.T) {
	t.Parallel()
	fn, fx := sourceEnv(t, sourceConfig{Source: "kinesis", KeyPaths: []string{"order_id"}, LabelPath: "label"})
	a1, b1 := kinesisRecord("shardId-A", 1, "a-1", "a1"), kinesisRecord("shardId-B", 2, "b-1", "b1")
	a2, b2 := kinesisRecord("shardId-A", 3, "a-2", "a2"), kinesisRecord("shardId-B", 4, "b-2", "b2")
	fx.failNext("a1", 1)
	got := batchFailures(t, invokeJSON(t, fn, events.KinesisEvent{Records: []events.KinesisEventRecord{a1, b1, a2, b2}}))
	if want := seqsOf([]events.KinesisEventRecord{a1, a2}); !slices.Equal(got, want) {
		t.Fatalf("reported %v, want shard A's records %v", got, want)
	}
	fx.wantRuns(t, map[string]int{"a1": 0, "a2": 0, "b1": 1, "b2": 1})
}

// The same fact put twice into the stream (a producer's retried PutRecord: two sequence
// numbers) runs once: the key is the data's, not the sequence number.
func TestKinesisHandlerProducerRetry(t *testing.T) {
	t.Parallel()
	fn, fx := sourceEnv(t, sourceConfig{Source: "kinesis", KeyPaths: []string{"order_id"}, LabelPath: "label"})
	first, again := kinesisRecord("shardId-000000000000", 1, "o-1", "p1"), kinesisRecord("shardId-000000000000", 2, "o-1", "p1")
	again.Kinesis.ApproximateArrivalTimestamp = events.SecondsEpochTime{Time: time.Unix(1700000100, 0)}
	if got := batchFailures(t, invokeJSON(t, fn, events.KinesisEvent{Records: []events.KinesisEventRecord{first, again}})); len(got) != 0 {
		t.Fatalf("reported %v", got)
	}
	fx.wantRuns(t, map[string]int{"p1": 1})
}

// dynamoRecord is a DynamoDB Streams INSERT of an outbox item with an event id.
func dynamoRecord(seq int, eventID, label string) events.DynamoDBEventRecord {
	sn := fmt.Sprintf("%021d", 100000+seq)
	return events.DynamoDBEventRecord{
		AWSRegion: "eu-west-1", EventID: fmt.Sprintf("c4ca4238a0b923820dcc509a6f75849%d", seq), EventName: "INSERT",
		EventSource: "aws:dynamodb", EventVersion: "1.1",
		EventSourceArn: "arn:aws:dynamodb:eu-west-1:000000000000:table/orders/stream/2026-01-01T00:00:00.000",
		Change: events.DynamoDBStreamRecord{
			ApproximateCreationDateTime: events.SecondsEpochTime{Time: time.Unix(1700000000, 0)},
			Keys: map[string]events.DynamoDBAttributeValue{
				"pk": events.NewStringAttribute("order#" + eventID), "sk": events.NewStringAttribute("event#" + eventID),
			},
			NewImage: map[string]events.DynamoDBAttributeValue{
				"pk":       events.NewStringAttribute("order#" + eventID),
				"sk":       events.NewStringAttribute("event#" + eventID),
				"event_id": events.NewStringAttribute(eventID),
				"label":    events.NewStringAttribute(label),
				"amount":   events.NewNumberAttribute("12.50"),
				"tags":     events.NewStringSetAttribute([]string{"new"}),
				"paid":     events.NewBooleanAttribute(true),
				"note":     events.NewNullAttribute(),
				"lines": events.NewListAttribute([]events.DynamoDBAttributeValue{
					events.NewMapAttribute(map[string]events.DynamoDBAttributeValue{"sku": events.NewStringAttribute("A1")}),
				}),
			},
			SequenceNumber: sn, SizeBytes: 120, StreamViewType: "NEW_IMAGE",
		},
	}
}

// A DynamoDB Streams batch with a failure mid-batch, keyed on the event id the writer put in
// the item: reported by sequence number from the failure on; the retry from the checkpoint
// runs the rest once and replays nothing twice.
func TestDynamoDBHandlerMidBatchFailure(t *testing.T) {
	t.Parallel()
	fn, fx := sourceEnv(t, sourceConfig{Source: "dynamodb", KeyPaths: []string{"new_image.event_id"}, LabelPath: "new_image.label"})
	var batch []events.DynamoDBEventRecord
	for i := range 5 {
		batch = append(batch, dynamoRecord(i+1, fmt.Sprintf("e-%d", i+1), fmt.Sprintf("d%d", i+1)))
	}
	fx.failNext("d2", 1)
	got := batchFailures(t, invokeJSON(t, fn, events.DynamoDBEvent{Records: batch}))
	var want []string
	for _, r := range batch[1:] {
		want = append(want, r.Change.SequenceNumber)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("reported %v, want %v", got, want)
	}
	if a := fx.take(); !slices.Equal(a, []string{"d1", "d2"}) {
		t.Fatalf("attempted %v, want d1 d2", a)
	}
	// Retry from the checkpoint, then the whole batch again.
	if got := batchFailures(t, invokeJSON(t, fn, events.DynamoDBEvent{Records: batch[1:]})); len(got) != 0 {
		t.Fatalf("retry reported %v", got)
	}
	if got := batchFailures(t, invokeJSON(t, fn, events.DynamoDBEvent{Records: batch})); len(got) != 0 {
		t.Fatalf("the whole batch again reported %v", got)
	}
	if a := fx.take(); !slices.Equal(a, []string{"d2", "d3", "d4", "d5"}) {
		t.Fatalf("retries attempted %v, want d2..d5 once each", a)
	}
	fx.wantRuns(t, map[string]int{"d1": 1, "d2": 1, "d3": 1, "d4": 1, "d5": 1})
}

// eventBridgeEvent is an EventBridge event with a fresh envelope id around detail.
func eventBridgeEvent(id, detail string) events.EventBridgeEvent {
	return events.EventBridgeEvent{
		Version: "0", ID: id, DetailType: "OrderPlaced", Source: "shop.orders", AccountID: "000000000000",
		Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Region: "eu-west-1",
		Resources: []string{}, Detail: json.RawMessage(detail),
	}
}

// EventBridge: the same detail under two envelope ids (a producer's retried PutEvents) runs
// once; a failed effect returns an error, so Lambda's retry runs it; a detail without the key
// is not done with (an error), never dropped as a success.
func TestEventBridgeHandler(t *testing.T) {
	t.Parallel()
	fn, fx := sourceEnv(t, sourceConfig{Source: "eventbridge", KeyPaths: []string{"order_id"}, LabelPath: "label"})
	for _, id := range []string{"6a7e8feb-b491-4cf7-a9f1-bf3703467718", "0d9f4a3c-2b1e-4c8a-9f6e-7d5c4b3a2918"} {
		if o := invokeJSON(t, fn, eventBridgeEvent(id, `{"order_id":"o-1","label":"e1"}`)); o.failed {
			t.Fatalf("envelope %s: %s", id, o.body)
		}
	}
	fx.wantRuns(t, map[string]int{"e1": 1})

	fx.failNext("e2", 1)
	if o := invokeJSON(t, fn, eventBridgeEvent("f00dbabe-0000-4000-8000-000000000001", `{"order_id":"o-2","label":"e2"}`)); !o.failed || !strings.Contains(string(o.body), "event not done") {
		t.Fatalf("a failed effect answered %s failed=%v, want an error", o.body, o.failed)
	}
	if o := invokeJSON(t, fn, eventBridgeEvent("f00dbabe-0000-4000-8000-000000000001", `{"order_id":"o-2","label":"e2"}`)); o.failed {
		t.Fatalf("Lambda's retry: %s", o.body)
	}
	fx.wantRuns(t, map[string]int{"e2": 1})

	if o := invokeJSON(t, fn, eventBridgeEvent("f00dbabe-0000-4000-8000-000000000002", `{"label":"e3"}`)); !o.failed || !strings.Contains(string(o.body), "no idempotency key") {
		t.Fatalf("a detail without the key answered %s failed=%v, want an error naming the missing key", o.body, o.failed)
	}
	fx.wantRuns(t, map[string]int{"e3": 0})
}

// s3Record is an S3 notification of a put of key (as S3 sends it: URL-encoded) in bucket.
func s3Record(bucket, key, version, sequencer string) events.S3EventRecord {
	return events.S3EventRecord{
		EventVersion: "2.1", EventSource: "aws:s3", AWSRegion: "eu-west-1",
		EventTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), EventName: "ObjectCreated:Put",
		PrincipalID:       events.S3UserIdentity{PrincipalID: "AWS:AIDAEXAMPLE"},
		RequestParameters: events.S3RequestParameters{SourceIPAddress: "127.0.0.1"},
		ResponseElements:  map[string]string{"x-amz-request-id": "C3D13FE58DE4C810", "x-amz-id-2": "FMyUVURIY8"},
		S3: events.S3Entity{
			SchemaVersion: "1.0", ConfigurationID: "uploads",
			Bucket: events.S3Bucket{Name: bucket, Arn: "arn:aws:s3:::" + bucket, OwnerIdentity: events.S3UserIdentity{PrincipalID: "A3NL1KOZZKExample"}},
			Object: events.S3Object{Key: key, Size: 1024, VersionID: version, ETag: "d41d8cd98f00b204e9800998ecf8427e", Sequencer: sequencer},
		},
	}
}

// S3: a record that fails makes the invocation fail; Lambda's retry of the whole event replays
// the record done before and runs the failed one. Two versions of one key are two facts; the
// same notification twice is one; the key is URL-decoded.
func TestS3Handler(t *testing.T) {
	t.Parallel()
	fn, fx := sourceEnv(t, sourceConfig{Source: "s3"})
	ev := events.S3Event{Records: []events.S3EventRecord{
		s3Record("uploads", "photos/my+photo.jpg", "v1", "0055AED6DCD90281E5"),
		s3Record("uploads", "photos/b.jpg", "", "0055AED6DCD90281E6"),
	}}
	fx.failNext("photos/b.jpg", 1)
	if o := invokeJSON(t, fn, ev); !o.failed || !strings.Contains(string(o.body), "photos/b.jpg") {
		t.Fatalf("a failed record answered %s failed=%v, want an error naming it", o.body, o.failed)
	}
	if o := invokeJSON(t, fn, ev); o.failed {
		t.Fatalf("Lambda's retry: %s", o.body)
	}
	if a := fx.take(); !slices.Equal(a, []string{"photos/my photo.jpg", "photos/b.jpg", "photos/b.jpg"}) {
		t.Fatalf("attempted %v, want the first record once and the failed one twice", a)
	}
	// A new version of the object is a new fact; the same notification again is not.
	next := events.S3Event{Records: []events.S3EventRecord{s3Record("uploads", "photos/my+photo.jpg", "v2", "0055AED6DCD90281F0")}}
	for range 2 {
		if o := invokeJSON(t, fn, next); o.failed {
			t.Fatalf("new version: %s", o.body)
		}
	}
	fx.wantRuns(t, map[string]int{"photos/my photo.jpg": 2, "photos/b.jpg": 1})
	// The notification S3 sends when it is configured has no records.
	if o := fn.invoke(`{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"2026-01-01T00:00:00.000Z","Bucket":"uploads","RequestId":"5582815E1AEA5ADF","HostId":"8cLeGAmw098X5cv4Zkwcmo8vvZa3eH3eKxsPzbB9wrR+YstdA6Knx4Ip8EXAMPLE"}`, 20*time.Second); o.failed {
		t.Fatalf("s3:TestEvent: %s", o.body)
	}
}
