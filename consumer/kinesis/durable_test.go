package kinesis_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/consumer/dynamocheckpoints"
	"github.com/idemkit/idem/consumer/kinesis"
	"github.com/idemkit/idem/consumer/pgcheckpoints"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/idemkit/idem/store/memstore"
)

// checkpointTable creates a checkpoint table on DynamoDB Local for the test and returns a
// function that opens the application's checkpoints in it, as a new process would.
func checkpointTable(t *testing.T) func(app string) kinesis.Checkpoints {
	t.Helper()
	ep := testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
	db := dynamostore.LocalClient(ep, nil)
	name := "idem_checkpoints_" + randHex(6)
	open := func(app string) kinesis.Checkpoints {
		cps, err := dynamocheckpoints.New(dynamocheckpoints.Options{Client: db, Table: name, Application: app})
		if err != nil {
			t.Fatal(err)
		}
		return cps
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := open("x").(*dynamocheckpoints.Checkpoints).CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return open
}

// pgCheckpointTable makes a PostgreSQL checkpoint table for the test and returns a function
// that opens the application's checkpoints in it, as a new process would.
func pgCheckpointTable(t *testing.T) func(app string) kinesis.Checkpoints {
	t.Helper()
	db, err := pgxpool.New(context.Background(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	table := "checkpoints_" + randHex(6)
	t.Cleanup(func() { _, _ = db.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	return func(app string) kinesis.Checkpoints {
		cps, err := pgcheckpoints.New(db, pgcheckpoints.Options{Table: table, Application: app})
		if err != nil {
			t.Fatal(err)
		}
		if err := cps.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		return cps
	}
}

// tally counts, per record id, the handler's runs, and per worker the shards it handled.
type tally struct {
	mu     sync.Mutex
	runs   map[string]int
	shards map[string]map[string]bool // worker → shard ids
	first  map[string]time.Time       // worker → its first run
}

func newTally() *tally {
	return &tally{runs: map[string]int{}, shards: map[string]map[string]bool{}, first: map[string]time.Time{}}
}

// consumer returns a consumer on its own idem store whose handler counts into the tally under
// the worker's name. (A store of its own per run stands for keys the store no longer keeps: a
// record read again runs its handler again.)
func (ta *tally) consumer(t *testing.T, eng *idem.Engine, worker string) *consumer.Consumer {
	t.Helper()
	c, err := consumer.New(consumer.Options{Runner: eng, Logger: quiet(), Key: func(m *consumer.Message) (string, error) {
		var ev struct{ ID string }
		return ev.ID, json.Unmarshal(m.Body, &ev)
	}}, func(_ context.Context, m *consumer.Message) ([]byte, error) {
		var ev struct{ ID string }
		_ = json.Unmarshal(m.Body, &ev)
		ta.mu.Lock()
		defer ta.mu.Unlock()
		ta.runs[ev.ID]++
		if ta.shards[worker] == nil {
			ta.shards[worker] = map[string]bool{}
			ta.first[worker] = time.Now()
		}
		ta.shards[worker][m.Header["shard-id"][0]] = true
		return nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (ta *tally) count() int {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	return len(ta.runs)
}

// waitFor waits until the tally holds n record ids.
func (ta *tally) waitFor(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ta.count() < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d of %d records", ta.count(), n)
		}
	}
}

// onceEach fails unless each of the records ids from..to-1 ran exactly once.
func (ta *tally) onceEach(t *testing.T, from, to int) {
	t.Helper()
	ta.mu.Lock()
	defer ta.mu.Unlock()
	for i := from; i < to; i++ {
		if n := ta.runs[fmt.Sprint("r", i)]; n != 1 {
			t.Errorf("record r%d ran %d times, want once", i, n)
		}
	}
}

func engine(t *testing.T) *idem.Engine {
	t.Helper()
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func putRecords(t *testing.T, client *awskinesis.Client, stream string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		body, _ := json.Marshal(map[string]string{"id": fmt.Sprint("r", i)})
		if _, err := client.PutRecord(context.Background(), &awskinesis.PutRecordInput{StreamName: aws.String(stream), Data: body,
			PartitionKey: aws.String(fmt.Sprint("k", i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// A worker stopped and started again, in a new process with checkpoints in DynamoDB or in
// PostgreSQL, reads on after its checkpoints: no record before them is read again (its
// handler would run again, the store standing for one whose keys have expired), and none after
// them is skipped. With checkpoints in memory, the new process reads every shard again from
// TRIM_HORIZON.
func TestRestartResumesAfterCheckpoint(t *testing.T) {
	t.Parallel()
	client := kinesisClient(t)
	open := checkpointTable(t)
	openPG := pgCheckpointTable(t)
	for _, kind := range []string{"dynamodb", "postgres", "memory"} {
		t.Run(kind, func(t *testing.T) {
			durable := kind != "memory"
			stream := newStream(t, client, 2)
			checkpoints := func() kinesis.Checkpoints {
				switch kind {
				case "dynamodb":
					return open(stream)
				case "postgres":
					return openPG(stream)
				}
				return kinesis.NewMemoryCheckpoints()
			}
			ta := newTally()
			opt := kinesis.Options{Client: client, Stream: stream, PollInterval: 50 * time.Millisecond, LeaseDuration: 3 * time.Second, Logger: quiet()}
			putRecords(t, client, stream, 0, 20)
			opt.Checkpoints = checkpoints()
			w, err := kinesis.Start(context.Background(), ta.consumer(t, engine(t), "first"), opt)
			if err != nil {
				t.Fatal(err)
			}
			ta.waitFor(t, 20)
			w.Stop()
			putRecords(t, client, stream, 20, 40)
			opt.Checkpoints = checkpoints()
			w, err = kinesis.Start(context.Background(), ta.consumer(t, engine(t), "second"), opt)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			ta.waitFor(t, 40)
			time.Sleep(300 * time.Millisecond) // time to read anything else
			w.Stop()
			if durable {
				ta.onceEach(t, 0, 40)
				return
			}
			ta.mu.Lock()
			defer ta.mu.Unlock()
			for i := range 20 {
				if n := ta.runs[fmt.Sprint("r", i)]; n != 2 {
					t.Errorf("in-memory checkpoints: record r%d ran %d times, want twice (read again from TRIM_HORIZON)", i, n)
				}
			}
		})
	}
}

// Two workers sharing checkpoints split a stream's shards between them, each shard read by
// one; when one stops, it gives its leases up and the other reads its shards at once, long
// before the leases would have run out.
//
// What the worker promises, and so what is checked: when Stop returns, the stopped worker holds
// no live lease (it gave them up; had it not, they would stay live for up to a lease after its
// last renewal, which is never more than a third of a lease before). The other worker claims
// them at its next sync, which starts within a sync interval (a third of the lease) and ends
// within another (its time limit): within two sync intervals of Stop returning, plus the
// test's own polling. Stop's own time (finishing the batches under way) is not counted: it
// depends on the load of the machine, not on the hand-over.
func TestWorkersSplitShards(t *testing.T) {
	t.Parallel()
	client := kinesisClient(t)
	stream := newStream(t, client, 4)
	cps := checkpointTable(t)(stream)
	const lease = 3 * time.Second
	ta := newTally()
	eng := engine(t)
	opt := kinesis.Options{Client: client, Stream: stream, Checkpoints: cps, PollInterval: 50 * time.Millisecond, LeaseDuration: lease, Logger: quiet()}
	a, err := kinesis.Start(context.Background(), ta.consumer(t, eng, "a"), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	owners := waitOwners(t, cps, func(m map[string]int) bool { return len(m) == 1 && sum(m) == 4 })
	t.Logf("alone, a holds %v", owners)
	var ownerA string
	for o := range owners {
		ownerA = o
	}
	b, err := kinesis.Start(context.Background(), ta.consumer(t, eng, "b"), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	owners = waitOwners(t, cps, func(m map[string]int) bool { return len(m) == 2 && sum(m) == 4 && maxOf(m) == 2 })
	t.Logf("with b, leases %v", owners)
	putRecords(t, client, stream, 0, 40)
	ta.waitFor(t, 40)
	ta.onceEach(t, 0, 40)
	ta.mu.Lock()
	for s := range ta.shards["a"] {
		if ta.shards["b"][s] {
			t.Errorf("shard %s read by both workers", s)
		}
	}
	if len(ta.shards["a"])+len(ta.shards["b"]) != 4 {
		t.Errorf("a read %v and b %v, want the four shards split", ta.shards["a"], ta.shards["b"])
	}
	ta.mu.Unlock()

	stopping := time.Now()
	a.Stop()
	stopped := time.Now()
	ls, err := cps.Leases(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		if l.Owner == ownerA && l.Live(stopped) {
			t.Errorf("a still holds shard %s until %v after Stop returned, want its leases given up", l.Shard, l.Until.Sub(stopped))
		}
	}
	waitOwners(t, cps, func(m map[string]int) bool { return len(m) == 1 && sum(m) == 4 && m[ownerA] == 0 })
	took := time.Since(stopped)
	t.Logf("a's Stop took %v; b held every shard %v after it returned", stopped.Sub(stopping), took)
	const syncInterval, polling = lease / 3, 250 * time.Millisecond
	if took >= 2*syncInterval+polling {
		t.Errorf("b took a's shards over %v after a's Stop returned, want within two sync intervals (%v) and the test's polling (%v)", took, 2*syncInterval, polling)
	}
	putRecords(t, client, stream, 40, 60)
	ta.waitFor(t, 60)
	ta.onceEach(t, 0, 60)
}

// A worker killed in the middle of a batch (after a record's effect, before its checkpoint)
// is taken over by the other worker once its lease runs out, from its last checkpoint: the
// record whose checkpoint was lost is read again as a duplicate, and every record's effect
// happens once.
func TestKilledWorkerTakenOverAfterLease(t *testing.T) {
	t.Parallel()
	client := kinesisClient(t)
	stream := newStream(t, client, 1)
	cps := checkpointTable(t)(stream)
	const lease = 2 * time.Second
	ta := newTally()
	eng := engine(t)
	putRecords(t, client, stream, 0, 20)
	var mu sync.Mutex
	acks := 0
	var killed time.Time
	opt := kinesis.Options{Client: client, Stream: stream, Checkpoints: cps, Limit: 10, PollInterval: 50 * time.Millisecond, LeaseDuration: lease, Logger: quiet()}
	a, err := kinesis.Start(context.Background(), ta.consumer(t, eng, "a"), kinesis.WithBeforeAck(opt, func() bool {
		mu.Lock()
		defer mu.Unlock()
		if acks++; acks == 5 {
			killed = time.Now()
			return true
		}
		return false
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	waitOwners(t, cps, func(m map[string]int) bool { return len(m) == 1 }) // a reads the shard
	b, err := kinesis.Start(context.Background(), ta.consumer(t, eng, "b"), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	ta.waitFor(t, 20)
	ta.onceEach(t, 0, 20)
	mu.Lock()
	defer mu.Unlock()
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if killed.IsZero() || ta.runs["r4"] != 1 {
		t.Fatalf("a was not killed after the fifth record's effect (killed %v)", killed)
	}
	if cp, err := cps.Checkpoint(context.Background(), "shardId-000000000000"); err != nil || cp == "" {
		t.Fatalf("b saved no checkpoint: %q %v", cp, err)
	}
	if took := ta.first["b"].Sub(killed); took < lease/2 {
		t.Errorf("b read a's shard %v after a was killed, before a's lease ran out", took)
	}
}

func waitOwners(t *testing.T, cps kinesis.Checkpoints, ok func(map[string]int) bool) map[string]int {
	t.Helper()
	var m map[string]int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ls, err := cps.Leases(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		m = map[string]int{}
		for _, l := range ls {
			if l.Live(time.Now()) {
				m[l.Owner]++
			}
		}
		if ok(m) {
			return m
		}
	}
	t.Fatalf("leases held %v", m)
	return nil
}

func sum(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

func maxOf(m map[string]int) (n int) {
	for _, v := range m {
		n = max(n, v)
	}
	return n
}
