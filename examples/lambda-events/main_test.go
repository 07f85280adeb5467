package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
)

// The tests run main as AWS Lambda runs it: the test binary starts itself again as a runtime
// process (main, then lambda.Start), which polls a Runtime API the test serves
// (GET /2018-06-01/runtime/invocation/next, POST …/{id}/response or …/{id}/error). The test
// plays the platform: it sends each source's events in their JSON shapes and retries the way
// the platform does. The idem table is on DynamoDB Local; the warehouse is the test's.

const runtimeEnv = "LAMBDA_EVENTS_TEST_RUNTIME"

func TestMain(m *testing.M) {
	if os.Getenv(runtimeEnv) != "" {
		main() // the runtime process: never returns
	}
	os.Exit(m.Run())
}

// warehouse counts the shipments it is sent, and fails the calls it is told to.
type warehouse struct {
	mu      sync.Mutex
	shipped map[string]int
	fail    map[string]int // calls left to fail, per shipment
}

func (w *warehouse) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail[string(b)] > 0 {
		w.fail[string(b)]--
		rw.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.shipped[string(b)]++
}

// failNext makes the warehouse refuse the next call for shipment what.
func (w *warehouse) failNext(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail[what]++
}

// want fails the test unless each shipment happened exactly once, and no other.
func (w *warehouse) want(t *testing.T, shipments ...string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range shipments {
		if w.shipped[s] != 1 {
			t.Errorf("%q shipped %d times, want once", s, w.shipped[s])
		}
	}
	if len(w.shipped) != len(shipments) {
		t.Errorf("shipped %v, want %q once each", w.shipped, shipments)
	}
}

// function is one deployed function: a Runtime API and the runtime process polling it.
type function struct {
	t    *testing.T
	next chan invocation
}

type invocation struct {
	payload []byte
	result  chan answer
}

// answer is how an invocation ended: its response, or its error document.
type answer struct {
	body   []byte
	failed bool
}

// deploy starts the function for source, on a fresh idem table, shipping to a new warehouse.
func deploy(t *testing.T, source string) (*function, *warehouse) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test (DynamoDB Local); skipped with -short")
	}
	ep := testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
	client := dynamostore.LocalClient(ep, nil)
	table := fmt.Sprintf("example_lambda_%s_%08x", source, rand.Uint32())
	st, err := dynamostore.New(dynamostore.Options{Client: client, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.CreateTable(ctx, dynamostore.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	})

	wh := &warehouse{shipped: map[string]int{}, fail: map[string]int{}}
	whSrv := httptest.NewServer(wh)
	t.Cleanup(whSrv.Close)

	fn := &function{t: t, next: make(chan invocation)}
	var mu sync.Mutex
	open := map[string]invocation{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		select {
		case inv := <-fn.next:
			id := fmt.Sprintf("req-%016x", rand.Uint64())
			mu.Lock()
			open[id] = inv
			mu.Unlock()
			w.Header().Set("Lambda-Runtime-Aws-Request-Id", id)
			w.Header().Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(30*time.Second).UnixMilli(), 10))
			w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:eu-west-1:000000000000:function:shipping")
			_, _ = w.Write(inv.payload)
		case <-r.Context().Done():
		}
	})
	reply := func(failed bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			inv, ok := open[r.PathValue("id")]
			delete(open, r.PathValue("id"))
			mu.Unlock()
			if ok {
				inv.result <- answer{body: b, failed: failed}
			}
			w.WriteHeader(http.StatusAccepted)
		}
	}
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", reply(false))
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", reply(true))
	api := httptest.NewServer(mux)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runtimeEnv+"=1",
		"AWS_LAMBDA_RUNTIME_API="+strings.TrimPrefix(api.URL, "http://"),
		"AWS_LAMBDA_FUNCTION_NAME=shipping", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE=128", "AWS_REGION=eu-west-1",
		"IDEM_EVENT_SOURCE="+source, "IDEM_DYNAMODB_ENDPOINT="+ep, "IDEM_TABLE="+table, "WAREHOUSE_URL="+whSrv.URL)
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		api.Close()
		if t.Failed() {
			t.Logf("function's output:\n%s", stderr.String())
		}
	})
	return fn, wh
}

// invoke sends event (encoded to JSON) and returns how the invocation ended.
func (f *function) invoke(event any) answer {
	f.t.Helper()
	payload, err := json.Marshal(event)
	if err != nil {
		f.t.Fatal(err)
	}
	inv := invocation{payload: payload, result: make(chan answer, 1)}
	timeout := time.After(30 * time.Second)
	select {
	case f.next <- inv:
	case <-timeout:
		f.t.Fatal("the function did not ask for an invocation")
	}
	select {
	case a := <-inv.result:
		return a
	case <-timeout:
		f.t.Fatal("the function did not answer")
	}
	return answer{}
}

// failures is the sequence numbers a stream batch's response reports.
func (a answer) failures(t *testing.T) []string {
	t.Helper()
	var resp events.KinesisEventResponse // the DynamoDB response has the same shape
	if a.failed || json.Unmarshal(a.body, &resp) != nil || resp.BatchItemFailures == nil {
		t.Fatalf("batch response %s (failed: %v), want batchItemFailures", a.body, a.failed)
	}
	var seqs []string
	for _, f := range resp.BatchItemFailures {
		seqs = append(seqs, f.ItemIdentifier)
	}
	return seqs
}

func wantSeqs(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("batch item failures %v, want %v", got, want)
	}
}

// EventBridge: the producer retried PutEvents (the same detail under a new envelope id), and
// the warehouse failed once, so Lambda retried that invocation: each order ships once.
func TestEventBridge(t *testing.T) {
	fn, wh := deploy(t, "eventbridge")
	event := func(id, order string) events.EventBridgeEvent {
		return events.EventBridgeEvent{Version: "0", ID: id, DetailType: "OrderPlaced", Source: "shop.orders",
			AccountID: "000000000000", Time: time.Unix(1700000000, 0).UTC(), Region: "eu-west-1", Resources: []string{},
			Detail: json.RawMessage(`{"order_id":"` + order + `","sku":"book"}`)}
	}
	if a := fn.invoke(event("7bf73129-1428-4cd3-a780-95db273d1602", "o-1")); a.failed {
		t.Fatalf("first event: %s", a.body)
	}
	if a := fn.invoke(event("e2a5f2d0-75a1-4b3c-9f0e-0a1b2c3d4e5f", "o-1")); a.failed {
		t.Fatalf("the producer's retry: %s", a.body)
	}
	wh.failNext("order o-2 book")
	if a := fn.invoke(event("0d3f8c1e-0000-4000-8000-000000000002", "o-2")); !a.failed {
		t.Fatalf("the warehouse failed, yet the invocation succeeded: %s", a.body)
	}
	if a := fn.invoke(event("0d3f8c1e-0000-4000-8000-000000000002", "o-2")); a.failed { // Lambda's retry
		t.Fatalf("Lambda's retry: %s", a.body)
	}
	wh.want(t, "order o-1 book", "order o-2 book")
}

func kinesisRecord(seq int, order string) events.KinesisEventRecord {
	sn := fmt.Sprintf("4959%040d", seq)
	return events.KinesisEventRecord{
		AwsRegion: "eu-west-1", EventID: "shardId-000000000000:" + sn, EventName: "aws:kinesis:record",
		EventSource: "aws:kinesis", EventSourceArn: "arn:aws:kinesis:eu-west-1:000000000000:stream/orders",
		EventVersion: "1.0", InvokeIdentityArn: "arn:aws:iam::000000000000:role/shipping",
		Kinesis: events.KinesisRecord{
			ApproximateArrivalTimestamp: events.SecondsEpochTime{Time: time.Unix(1700000000+int64(seq), 0)},
			Data:                        []byte(`{"order_id":"` + order + `","sku":"book"}`),
			PartitionKey:                order, SequenceNumber: sn, KinesisSchemaVersion: "1.0",
		},
	}
}

// Kinesis: a batch of one shard whose third record fails at the warehouse. The records before
// it ship; it and every later record are reported, none shipped out of order. Lambda retries
// from it: it and the later ones ship, and o-1 written twice by the producer (two sequence
// numbers) ships once. The whole batch sent again (a retried invocation) ships nothing more.
func TestKinesis(t *testing.T) {
	fn, wh := deploy(t, "kinesis")
	batch := []events.KinesisEventRecord{kinesisRecord(1, "o-1"), kinesisRecord(2, "o-2"), kinesisRecord(3, "o-3"),
		kinesisRecord(4, "o-4"), kinesisRecord(5, "o-1")}
	wh.failNext("order o-3 book")
	wantSeqs(t, fn.invoke(events.KinesisEvent{Records: batch}).failures(t),
		batch[2].Kinesis.SequenceNumber, batch[3].Kinesis.SequenceNumber, batch[4].Kinesis.SequenceNumber)
	wantSeqs(t, fn.invoke(events.KinesisEvent{Records: batch[2:]}).failures(t))
	wantSeqs(t, fn.invoke(events.KinesisEvent{Records: batch}).failures(t))
	wh.want(t, "order o-1 book", "order o-2 book", "order o-3 book", "order o-4 book")
}

func dynamoRecord(seq int, name, order string) events.DynamoDBEventRecord {
	s := events.NewStringAttribute
	sn := fmt.Sprintf("%021d", seq)
	return events.DynamoDBEventRecord{
		AWSRegion: "eu-west-1", EventID: fmt.Sprintf("c81e728d9d4c2f636f067f89cc14862%d", seq), EventName: name,
		EventSource: "aws:dynamodb", EventVersion: "1.1",
		EventSourceArn: "arn:aws:dynamodb:eu-west-1:000000000000:table/orders/stream/2026-01-01T00:00:00.000",
		Change: events.DynamoDBStreamRecord{
			ApproximateCreationDateTime: events.SecondsEpochTime{Time: time.Unix(1700000000+int64(seq), 0)},
			Keys:                        map[string]events.DynamoDBAttributeValue{"pk": s("order#" + order), "sk": s("event#order.placed")},
			NewImage: map[string]events.DynamoDBAttributeValue{"pk": s("order#" + order), "sk": s("event#order.placed"),
				"event_id": s("order.placed/" + order), "order_id": s(order), "sku": s("book")},
			SequenceNumber: sn, SizeBytes: 120, StreamViewType: "NEW_IMAGE",
		},
	}
}

// DynamoDB Streams: the event items the writer put with each order. The second record fails at
// the warehouse and is reported with the later ones; the retry from it ships them, and o-1's
// event item rewritten (a MODIFY of the same event id) ships nothing more.
func TestDynamoDBStreams(t *testing.T) {
	fn, wh := deploy(t, "dynamodb")
	batch := []events.DynamoDBEventRecord{dynamoRecord(1, "INSERT", "o-1"), dynamoRecord(2, "INSERT", "o-2"),
		dynamoRecord(3, "INSERT", "o-3"), dynamoRecord(4, "MODIFY", "o-1")}
	wh.failNext("order o-2 book")
	wantSeqs(t, fn.invoke(events.DynamoDBEvent{Records: batch}).failures(t),
		batch[1].Change.SequenceNumber, batch[2].Change.SequenceNumber, batch[3].Change.SequenceNumber)
	wantSeqs(t, fn.invoke(events.DynamoDBEvent{Records: batch[1:]}).failures(t))
	wh.want(t, "order o-1 book", "order o-2 book", "order o-3 book")
}

func s3Record(key, version, sequencer string) events.S3EventRecord {
	return events.S3EventRecord{
		EventVersion: "2.1", EventSource: "aws:s3", AWSRegion: "eu-west-1", EventTime: time.Unix(1700000000, 0).UTC(),
		EventName: "ObjectCreated:Put", PrincipalID: events.S3UserIdentity{PrincipalID: "AWS:AIDAEXAMPLE"},
		RequestParameters: events.S3RequestParameters{SourceIPAddress: "198.51.100.7"},
		ResponseElements:  map[string]string{"x-amz-request-id": "C3D13FE58DE4C810", "x-amz-id-2": "FMyUVURIY8/IgAtTv8xRjskZQpcIZ9KG4V5Wp6S7S/JRWeUWerMUE5JgHvANOjpD"},
		S3: events.S3Entity{SchemaVersion: "1.0", ConfigurationID: "orders-upload",
			Bucket: events.S3Bucket{Name: "orders-inbox", OwnerIdentity: events.S3UserIdentity{PrincipalID: "A3NL1KOZZKExample"},
				Arn: "arn:aws:s3:::orders-inbox"},
			Object: events.S3Object{Key: key, Size: 1024, ETag: "d41d8cd98f00b204e9800998ecf8427e", VersionID: version, Sequencer: sequencer}},
	}
}

// S3: an event of two uploads whose second fails at the warehouse; Lambda retries the whole
// event, the first upload replays and the second ships. A duplicate notification of the first
// ships nothing; a new version of the same object is a new fact and ships.
func TestS3(t *testing.T) {
	fn, wh := deploy(t, "s3")
	a := s3Record("2026/orders+march.csv", "v1", "0055AED6DCD90281E5")
	b := s3Record("2026/returns.csv", "v1", "0055AED6DCD90281E6")
	wh.failNext("upload s3://orders-inbox/2026/returns.csv")
	if r := fn.invoke(events.S3Event{Records: []events.S3EventRecord{a, b}}); !r.failed {
		t.Fatalf("the warehouse failed, yet the invocation succeeded: %s", r.body)
	}
	if r := fn.invoke(events.S3Event{Records: []events.S3EventRecord{a, b}}); r.failed { // Lambda's retry
		t.Fatalf("Lambda's retry: %s", r.body)
	}
	if r := fn.invoke(events.S3Event{Records: []events.S3EventRecord{a}}); r.failed { // S3's duplicate
		t.Fatalf("duplicate notification: %s", r.body)
	}
	wh.want(t, "upload s3://orders-inbox/2026/orders march.csv", "upload s3://orders-inbox/2026/returns.csv")
	a2 := s3Record("2026/orders+march.csv", "v2", "0055AED6DCD90281E7")
	if r := fn.invoke(events.S3Event{Records: []events.S3EventRecord{a2}}); r.failed {
		t.Fatalf("a new version: %s", r.body)
	}
	wh.mu.Lock()
	defer wh.mu.Unlock()
	if n := wh.shipped["upload s3://orders-inbox/2026/orders march.csv"]; n != 2 {
		t.Errorf("two versions of one object shipped %d times, want twice", n)
	}
}
