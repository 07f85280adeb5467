package dynamostore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/idemkit/idem/store/storetest"
)

// sharedTransport carries every test's requests, so connections are reused across tests and
// can be closed before the leak check.
var sharedTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 512
	t.MaxIdleConnsPerHost = 512
	return t
}()

func TestMain(m *testing.M) {
	code := m.Run()
	sharedTransport.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// endpoint returns IDEM_DYNAMODB_ENDPOINT (default http://127.0.0.1:8000), skipping or failing
// the test when DynamoDB Local is not reachable.
func endpoint(t testing.TB) string {
	t.Helper()
	return testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
}

// counter counts the DynamoDB requests (HTTP attempts) a client sends, by operation.
type counter struct {
	base http.RoundTripper
	mu   sync.Mutex
	ops  []string
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.LastIndexByte(op, '.')+1:]
	c.mu.Lock()
	c.ops = append(c.ops, op)
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

// take returns the operations sent since the last take.
func (c *counter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := c.ops
	c.ops = nil
	return ops
}

type bundle struct {
	client *dynamodb.Client
	calls  *counter
	store  *dynamostore.Store
	table  string
}

// setup returns a store on a fresh table of its own, with a request counter in front of the
// client. opt's Client and Table are filled in.
func setup(t testing.TB, opt dynamostore.Options, rt ...func(http.RoundTripper) http.RoundTripper) *bundle {
	t.Helper()
	ep := endpoint(t)
	var base http.RoundTripper = sharedTransport
	for _, f := range rt {
		base = f(base)
	}
	b := &bundle{calls: &counter{base: base}}
	b.client = dynamostore.LocalClient(ep, b.calls)
	if opt.Table == "" {
		opt.Table = newTable(t, ep, opt)
	}
	b.table = opt.Table
	opt.Client = b.client
	st, err := dynamostore.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	b.store = st
	b.calls.take()
	return b
}

// newTable creates a table with a random name for opt's layout and drops it after the test.
func newTable(t testing.TB, ep string, opt dynamostore.Options) string {
	t.Helper()
	client := dynamostore.LocalClient(ep, sharedTransport)
	opt.Client = client
	opt.Table = fmt.Sprintf("idemtest_%s_%08x", strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()), rand.Uint32())
	if len(opt.Table) > 255 {
		opt.Table = opt.Table[len(opt.Table)-255:]
	}
	st, err := dynamostore.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.CreateTable(ctx, dynamostore.TableOptions{}); err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(opt.Table)}); err != nil {
			t.Errorf("DeleteTable %s: %v", opt.Table, err)
		}
	})
	return opt.Table
}

// TestConformance runs the storetest suite with a table per subtest and the default layout.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) idem.Store { return setup(t, dynamostore.Options{}).store })
}

// TestConformanceSingleTable runs the suite again on one shared table in a single-table
// layout: custom partition key, a sort key with a fixed value, a TTL attribute of another name,
// and a key prefix per subtest.
func TestConformanceSingleTable(t *testing.T) {
	t.Parallel()
	layout := dynamostore.Options{PartitionKey: "PK", SortKey: "SK", SortKeyValue: "IDEM", TTLAttribute: "expiry"}
	layout.Table = newTable(t, endpoint(t), layout)
	storetest.Run(t, func(t *testing.T) idem.Store {
		opt := layout
		opt.KeyPrefix = fmt.Sprintf("tenant%08x#", rand.Uint32())
		return setup(t, opt).store
	})
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	client := dynamostore.LocalClient("http://127.0.0.1:1", nil)
	for _, tc := range []struct {
		opt  dynamostore.Options
		want string
	}{
		{dynamostore.Options{Table: "t"}, "Options.Client"},
		{dynamostore.Options{Client: client}, "Options.Table"},
		{dynamostore.Options{Client: client, Table: "t", SortKeyValue: "x"}, "Options.SortKeyValue"},
		{dynamostore.Options{Client: client, Table: "t", KeyPrefix: "a\x00"}, "Options.KeyPrefix"},
		{dynamostore.Options{Client: client, Table: "t", TTLMargin: -time.Second}, "Options.TTLMargin"},
		{dynamostore.Options{Client: client, Table: "t", SweepPageSize: -1}, "Options.SweepPageSize"},
		{dynamostore.Options{Client: client, Table: "t", PartitionKey: "token"}, `"token"`},
		{dynamostore.Options{Client: client, Table: "t", SortKey: "pk"}, `"pk"`},
	} {
		_, err := dynamostore.New(tc.opt)
		if !isInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidInput naming %s", tc.opt, err, tc.want)
		}
	}
	st, err := dynamostore.New(dynamostore.Options{Client: client, Table: "t", SortKey: "sk"})
	if err != nil {
		t.Fatal(err)
	}
	o := st.Options()
	if o.PartitionKey != "pk" || o.SortKeyValue != "idem" || o.TTLAttribute != "ttl" || o.TTLMargin != time.Hour ||
		o.SweepPageSize != 1000 || o.SweepMaxPages != 10 {
		t.Errorf("defaults = %+v", o)
	}
}

// TestBadKeys: keys DynamoDB cannot hold are refused with ErrInvalidInput before any call.
func TestBadKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, dynamostore.Options{})
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	now := time.Now()
	for _, key := range []string{"", "a\x00b", "\xff\xfe", strings.Repeat("k", idem.MaxStorageKeyLen+1)} {
		if _, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour}); !isInvalid(err) {
			t.Errorf("Reserve(%q…): %v, want ErrInvalidInput", key[:min(len(key), 8)], err)
		}
		if _, err := b.store.Get(ctx, key); !isInvalid(err) {
			t.Errorf("Get(%q…): %v, want ErrInvalidInput", key[:min(len(key), 8)], err)
		}
	}
	if _, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: "\xff", Now: now, Lease: time.Second, TTL: time.Hour}); !isInvalid(err) {
		t.Errorf("Reserve with a non-UTF-8 fingerprint: %v, want ErrInvalidInput", err)
	}
	if ops := b.calls.take(); len(ops) != 0 {
		t.Errorf("invalid input sent %v to DynamoDB", ops)
	}
	// KeyPrefix and key together fit in MaxKeyBytes.
	prefixed, err := dynamostore.New(dynamostore.Options{Client: b.client, Table: b.table,
		KeyPrefix: strings.Repeat("p", dynamostore.MaxKeyBytes-idem.MaxStorageKeyLen+1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prefixed.Reserve(ctx, idem.ReserveRequest{Key: strings.Repeat("k", idem.MaxStorageKeyLen), Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour}); !isInvalid(err) {
		t.Errorf("Reserve of a key that overflows MaxKeyBytes with the prefix: %v, want ErrInvalidInput", err)
	}
	if ops := b.calls.take(); len(ops) != 0 {
		t.Errorf("invalid input sent %v to DynamoDB", ops)
	}
	// The longest allowed key works, part items included.
	long := strings.Repeat("k", idem.MaxStorageKeyLen)
	res, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: long, Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("Reserve of a %d-byte key: %v %+v", len(long), err, res)
	}
	body := make([]byte, 2*dynamostore.PartSize)
	if err := b.store.Complete(ctx, long, res.Record.Token, idem.Response{Status: 200, Body: body}, now, now.Add(time.Hour)); err != nil {
		t.Fatalf("Complete with parts on a long key: %v", err)
	}
}

// TestCallsPerOperation asserts the number and kind of DynamoDB requests of every path; the
// replay path in particular is one request (the bar), and the table in doc.go is
// this test's data.
func TestCallsPerOperation(t *testing.T) {
	t.Parallel()
	b := setup(t, dynamostore.Options{})
	ctx := context.Background()
	st := b.store
	fpA, fpB := idem.Fingerprint([]byte("a")), idem.Fingerprint([]byte("b"))
	now := time.Now()
	const lease, window = 10 * time.Second, time.Hour
	expect := func(what string, want ...string) {
		t.Helper()
		if got := b.calls.take(); !slices.Equal(got, want) {
			t.Errorf("%s: requests %v, want %v", what, got, want)
		}
	}

	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fpA, Now: now, Lease: lease, TTL: window})
	if err != nil || !res.Claimed {
		t.Fatal(err, res)
	}
	expect("new key", "PutItem")
	if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fpA, Now: now, Lease: lease, TTL: window}); err != nil || res.Claimed {
		t.Fatal(err, res)
	}
	expect("in-flight duplicate", "PutItem")
	if err := st.Extend(ctx, "k", res.Record.Token, now.Add(2*lease)); err != nil {
		t.Fatal(err)
	}
	expect("heartbeat within the window", "UpdateItem")
	if err := st.Complete(ctx, "k", res.Record.Token, idem.Response{Status: 201, Body: []byte("ok")}, now, now.Add(window)); err != nil {
		t.Fatal(err)
	}
	expect("complete", "UpdateItem")
	rep, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fpA, Now: now.Add(time.Second), Lease: lease, TTL: window})
	if err != nil || rep.Claimed || rep.Record.Response == nil || string(rep.Record.Response.Body) != "ok" {
		t.Fatal(err, rep)
	}
	expect("replay", "PutItem")
	if rep, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fpB, Now: now.Add(time.Second), Lease: lease, TTL: window}); err != nil || rep.Claimed {
		t.Fatal(err, rep)
	}
	expect("mismatch", "PutItem")
	if _, err := st.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	expect("get", "GetItem")

	// Through the engine: a replay is one request.
	eng, err := idem.New(st, idem.Options{Now: func() time.Time { return now.Add(2 * time.Second) }})
	if err != nil {
		t.Fatal(err)
	}
	r, err := eng.Do(ctx, "k", fpA, func(context.Context) (idem.Response, error) {
		t.Error("effect ran on a replay")
		return idem.Response{}, nil
	})
	if err != nil || !r.Replayed {
		t.Fatal(err, r)
	}
	expect("engine replay", "PutItem")

	// Takeover: two requests (the claim fails and returns the stale record; the takeover
	// write carries Attempts+1).
	res, _ = st.Reserve(ctx, idem.ReserveRequest{Key: "t", Fingerprint: fpA, Now: now, Lease: lease, TTL: window})
	b.calls.take()
	to, err := st.Reserve(ctx, idem.ReserveRequest{Key: "t", Fingerprint: fpA, Now: now.Add(lease), Lease: lease, TTL: window})
	if err != nil || !to.Claimed || !to.Takeover || to.Record.Attempts != 2 {
		t.Fatal(err, to)
	}
	expect("takeover", "PutItem", "PutItem")
	// Release, then a reclaim in the same microsecond: token prev+1 takes a second write.
	if err := st.Release(ctx, "t", to.Record.Token); err != nil {
		t.Fatal(err)
	}
	expect("release", "UpdateItem")
	again, err := st.Reserve(ctx, idem.ReserveRequest{Key: "t", Fingerprint: fpA, Now: now.Add(lease), Lease: lease, TTL: window})
	if err != nil || !again.Claimed || again.Record.Token != to.Record.Token+1 {
		t.Fatal(err, again, to.Record.Token)
	}
	expect("reclaim in the same microsecond", "PutItem", "PutItem")
	// Release and retry a microsecond later with the same request: a second write, which goes
	// on counting the record's starts; by another request: one write, a new record.
	if err := st.Release(ctx, "t", again.Record.Token); err != nil {
		t.Fatal(err)
	}
	b.calls.take()
	later := now.Add(lease + time.Millisecond)
	res, err = st.Reserve(ctx, idem.ReserveRequest{Key: "t", Fingerprint: fpA, Now: later, Lease: lease, TTL: window})
	if err != nil || !res.Claimed || res.Record.Token != later.UnixMicro() || res.Record.Starts != 4 {
		t.Fatal(err, res)
	}
	expect("retry of a released key", "PutItem", "PutItem")
	if err := st.Release(ctx, "t", res.Record.Token); err != nil {
		t.Fatal(err)
	}
	b.calls.take()
	later = later.Add(time.Millisecond)
	if res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "t", Fingerprint: fpB, Now: later, Lease: lease, TTL: window}); err != nil || !res.Claimed || res.Record.Token != later.UnixMicro() || res.Record.Starts != 1 {
		t.Fatal(err, res)
	}
	expect("reclaim of a released key by another request", "PutItem")
	// Extend past the window: two updates.
	cur, _ := st.Get(ctx, "t")
	b.calls.take()
	if err := st.Extend(ctx, "t", cur.Token, later.Add(2*window)); err != nil {
		t.Fatal(err)
	}
	expect("extend past the window", "UpdateItem", "UpdateItem")
	// A stale holder is fenced in one request.
	if err := st.Complete(ctx, "t", res.Record.Token, idem.Response{}, now, now.Add(window)); !errorsIs(err, idem.ErrLeaseLost) {
		t.Fatal(err)
	}
	expect("fenced complete", "UpdateItem")

	// A response larger than PartSize: one transaction to complete, and two requests to replay.
	res, _ = st.Reserve(ctx, idem.ReserveRequest{Key: "big", Fingerprint: fpA, Now: now, Lease: lease, TTL: window})
	b.calls.take()
	big := make([]byte, dynamostore.PartSize+100)
	if err := st.Complete(ctx, "big", res.Record.Token, idem.Response{Status: 200, Body: big}, now, now.Add(window)); err != nil {
		t.Fatal(err)
	}
	expect("complete, large", "TransactWriteItems")
	if rep, err := st.Reserve(ctx, idem.ReserveRequest{Key: "big", Fingerprint: fpA, Now: now, Lease: lease, TTL: window}); err != nil || rep.Claimed || len(rep.Record.Response.Body) != len(big) {
		t.Fatal(err, rep.Claimed)
	}
	expect("replay, large", "PutItem", "BatchGetItem")
}
