package kinesis

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
)

// Options configure a Worker. Client and Stream are required.
type Options struct {
	// Client is the Kinesis client. Required.
	Client *kinesis.Client
	// Stream is the stream's name. Required.
	Stream string
	// Checkpoints keep how far each shard is read, and which worker reads it. Workers of one
	// consumer application share one Checkpoints; two applications that each handle every
	// record (billing and shipping) each have their own. Default: NewMemoryCheckpoints(), this
	// worker's alone.
	Checkpoints Checkpoints
	// Start is where a shard without a checkpoint is read from: types.ShardIteratorTypeTrimHorizon
	// (the oldest record kept) or types.ShardIteratorTypeLatest (records put from now on).
	// Default TRIM_HORIZON.
	Start types.ShardIteratorType
	// Limit is the most records one GetRecords call returns. Default 100.
	Limit int32
	// PollInterval is how long a shard's reader waits after a GetRecords call that returned
	// nothing new (Kinesis allows five calls per second per shard). Default 1s.
	PollInterval time.Duration
	// LeaseDuration is how long a worker's claim on a shard lasts without renewal: a worker
	// that died leaves its shards to the others after it. Renewed every third of it. Default
	// 30s.
	LeaseDuration time.Duration
	// OnRejected, when set, is called with each record the consumer rejected (consumer.Rejected:
	// no key, a key reused for another fact, the handler's consumer.Reject), before the
	// checkpoint moves past it: a stream has no dead-letter queue, so this is where to keep it.
	// Default nil: the record is logged and passed.
	OnRejected func(ctx context.Context, m *consumer.Message, r consumer.Result)
	// Logger receives warnings. Default slog.Default().
	Logger *slog.Logger

	beforeAck func() bool // tests: true makes the worker behave as if killed before a checkpoint
}

// Worker reads every shard of a stream it holds the lease of, in order, and hands each record
// to a consumer. Create it with Start.
type Worker struct {
	c      *consumer.Consumer
	opt    Options
	owner  string
	log    *slog.Logger
	stop   chan struct{} // closed by Stop or Kill: take nothing new
	done   chan struct{} // closed when every reader has returned
	killed atomic.Bool
	once   sync.Once
	hctx   context.Context // the handlers' context: cancelled only by Kill
	kill   context.CancelFunc
	wg     sync.WaitGroup
}

// Start starts a worker that reads the stream and hands each record to c, until Stop (or
// ctx's end). It fails with an error matching idem.ErrInvalidInput, naming the field, if an
// option is invalid.
//
// Each shard is read in order, from its checkpoint on. A record done with (consumer.Processed
// or consumer.Duplicate) moves the checkpoint past it; a rejected one too, after OnRejected. A
// record not done with (consumer.InFlight, consumer.Failed) stops its shard: after the
// Result's RetryAfter (at least PollInterval) the shard is read again from that record, so no
// record of a shard is handled before the ones before it are done with. A shard that was split
// or merged (resharding) is read to its end before its children are read, so a partition key's
// records are handled in the order they were put, across the reshard.
func Start(ctx context.Context, c *consumer.Consumer, opt Options) (*Worker, error) {
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w: kinesis: invalid options: the consumer is nil", idem.ErrInvalidInput)
	case opt.Client == nil:
		return nil, fmt.Errorf("%w: kinesis: invalid options: Options.Client is required", idem.ErrInvalidInput)
	case opt.Stream == "":
		return nil, fmt.Errorf("%w: kinesis: invalid options: Options.Stream is required", idem.ErrInvalidInput)
	case opt.Limit < 0 || opt.PollInterval < 0 || opt.LeaseDuration < 0:
		return nil, fmt.Errorf("%w: kinesis: invalid options: Options.Limit, PollInterval and LeaseDuration must not be negative", idem.ErrInvalidInput)
	case opt.Start != "" && opt.Start != types.ShardIteratorTypeTrimHorizon && opt.Start != types.ShardIteratorTypeLatest:
		return nil, fmt.Errorf("%w: kinesis: invalid options: Options.Start %q is neither TRIM_HORIZON nor LATEST", idem.ErrInvalidInput, opt.Start)
	}
	if opt.Checkpoints == nil {
		opt.Checkpoints = NewMemoryCheckpoints()
	}
	opt.Start = cmp.Or(opt.Start, types.ShardIteratorTypeTrimHorizon)
	opt.Limit = cmp.Or(opt.Limit, 100)
	opt.PollInterval = cmp.Or(opt.PollInterval, time.Second)
	opt.LeaseDuration = cmp.Or(opt.LeaseDuration, 30*time.Second)
	var id [8]byte
	_, _ = rand.Read(id[:])
	w := &Worker{c: c, opt: opt, owner: hex.EncodeToString(id[:]), log: cmp.Or(opt.Logger, slog.Default()),
		stop: make(chan struct{}), done: make(chan struct{})}
	w.hctx, w.kill = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
			w.Stop()
		case <-w.done:
		}
	}()
	go w.run()
	return w, nil
}

// Stop stops the worker: it takes no new record, finishes the ones under way (and saves their
// checkpoints), gives up its leases as they run out, and returns when it has stopped.
func (w *Worker) Stop() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

// Kill stops the worker as a process killed at that instant: no checkpoint is saved from now
// on, and it returns without waiting for the record under way. Its leases run out after
// LeaseDuration, and another worker reads on from the last checkpoint saved.
func (w *Worker) Kill() {
	w.killed.Store(true)
	w.once.Do(func() { close(w.stop) })
	w.kill()
}

// Done is closed when the worker has stopped.
func (w *Worker) Done() <-chan struct{} { return w.done }

func (w *Worker) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// sleep waits d or until the worker stops; it reports whether the worker goes on.
func (w *Worker) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.stop:
		return false
	}
}

// reader is one shard's reader, running while the worker holds the shard's lease.
type reader struct {
	lost atomic.Bool // the lease was lost: stop
	done chan struct{}
}

// run lists the shards, claims the ones whose parents are read to their end, and starts a
// reader on each one claimed; every third of the lease it renews the claims and looks again.
func (w *Worker) run() {
	defer close(w.done)
	defer w.wg.Wait()
	readers := map[string]*reader{}
	every := w.opt.LeaseDuration / 3
	for {
		if err := w.sync(readers); err != nil && !w.stopped() {
			w.log.Warn("kinesis: listing or claiming shards failed", "stream", w.opt.Stream, "err", err)
		}
		if !w.sleep(every) {
			return
		}
	}
}

func (w *Worker) sync(readers map[string]*reader) error {
	ctx, cancel := context.WithTimeout(w.hctx, w.opt.LeaseDuration/3)
	defer cancel()
	shards, err := w.listShards(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, s := range shards {
		known[aws.ToString(s.ShardId)] = true
	}
	until := time.Now().Add(w.opt.LeaseDuration)
	for _, s := range shards {
		id := aws.ToString(s.ShardId)
		if r := readers[id]; r != nil {
			select {
			case <-r.done:
				delete(readers, id)
			default:
				if _, held, err := w.opt.Checkpoints.Claim(ctx, id, w.owner, until); err != nil || !held {
					r.lost.Store(true)
				}
				continue
			}
		}
		ready, err := w.parentsRead(ctx, s, known)
		if err != nil || !ready {
			continue
		}
		cp, held, err := w.opt.Checkpoints.Claim(ctx, id, w.owner, until)
		if err != nil {
			return err
		}
		if !held || cp == ShardEnd || w.stopped() {
			continue
		}
		r := &reader{done: make(chan struct{})}
		readers[id] = r
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer close(r.done)
			w.read(id, cp, r)
		}()
	}
	return nil
}

// parentsRead reports whether every parent of s that the stream still lists is read to its
// end (a parent past the stream's retention is gone, and so are its records).
func (w *Worker) parentsRead(ctx context.Context, s types.Shard, known map[string]bool) (bool, error) {
	for _, p := range []*string{s.ParentShardId, s.AdjacentParentShardId} {
		if p == nil || !known[*p] {
			continue
		}
		cp, err := w.opt.Checkpoints.Checkpoint(ctx, *p)
		if err != nil || cp != ShardEnd {
			return false, err
		}
	}
	return true, nil
}

func (w *Worker) listShards(ctx context.Context) ([]types.Shard, error) {
	var out []types.Shard
	in := &kinesis.ListShardsInput{StreamName: aws.String(w.opt.Stream)}
	for {
		resp, err := w.opt.Client.ListShards(ctx, in)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Shards...)
		if resp.NextToken == nil {
			return out, nil
		}
		in = &kinesis.ListShardsInput{NextToken: resp.NextToken}
	}
}

// read reads shard id from checkpoint cp on, until the worker stops, the lease is lost or the
// shard ends.
func (w *Worker) read(id, cp string, r *reader) {
	at := "" // a record to read again from (after a failure)
	var iter *string
	for !w.stopped() && !r.lost.Load() {
		if iter == nil {
			var err error
			if iter, err = w.iterator(id, cp, at); err != nil {
				w.log.Warn("kinesis: GetShardIterator failed", "stream", w.opt.Stream, "shard", id, "err", err)
				if !w.sleep(w.opt.PollInterval) {
					return
				}
				continue
			}
		}
		resp, err := w.opt.Client.GetRecords(w.hctx, &kinesis.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(w.opt.Limit)})
		if err != nil {
			w.log.Warn("kinesis: GetRecords failed", "stream", w.opt.Stream, "shard", id, "err", err)
			iter = nil
			if !w.sleep(w.opt.PollInterval) {
				return
			}
			continue
		}
		retry := time.Duration(-1)
		for _, rec := range resp.Records {
			if w.killed.Load() || r.lost.Load() {
				return
			}
			seq := aws.ToString(rec.SequenceNumber)
			m := Message(rec, w.opt.Stream, id)
			res := w.c.Handle(w.hctx, m)
			switch {
			case res.Outcome.Ack():
			case res.Outcome == consumer.Rejected:
				w.log.Warn("kinesis: record rejected; the checkpoint moves past it", "stream", w.opt.Stream, "shard", id, "sequence_number", seq, "err", res.Err)
				if w.opt.OnRejected != nil {
					w.opt.OnRejected(w.hctx, m, res)
				}
			default:
				retry, at = max(res.RetryAfter, w.opt.PollInterval), seq
			}
			if retry >= 0 {
				break
			}
			if w.opt.beforeAck != nil && w.opt.beforeAck() {
				w.Kill()
				return
			}
			if !w.save(id, seq, r) {
				return
			}
			cp = seq
		}
		if retry >= 0 {
			iter = nil
			if !w.sleep(retry) {
				return
			}
			continue
		}
		at = ""
		if resp.NextShardIterator == nil { // the shard is closed and read to its end
			w.save(id, ShardEnd, r)
			return
		}
		iter = resp.NextShardIterator
		if len(resp.Records) == 0 && aws.ToInt64(resp.MillisBehindLatest) == 0 && !w.sleep(w.opt.PollInterval) {
			return
		}
	}
}

// save saves the shard's checkpoint, unless the worker was killed; it reports whether the
// reader goes on (false: killed, or the lease is lost).
func (w *Worker) save(id, cp string, r *reader) bool {
	if w.killed.Load() {
		return false
	}
	held, err := w.opt.Checkpoints.Save(w.hctx, id, w.owner, cp)
	if err != nil {
		// The record is done with; a checkpoint not saved only makes a later reader read it
		// again, as a duplicate.
		w.log.Warn("kinesis: saving a checkpoint failed", "stream", w.opt.Stream, "shard", id, "err", err)
		return true
	}
	if !held {
		r.lost.Store(true)
	}
	return held
}

// iterator returns an iterator at record at, or after checkpoint cp, or at Options.Start.
func (w *Worker) iterator(id, cp, at string) (*string, error) {
	in := &kinesis.GetShardIteratorInput{StreamName: aws.String(w.opt.Stream), ShardId: aws.String(id)}
	switch {
	case at != "":
		in.ShardIteratorType, in.StartingSequenceNumber = types.ShardIteratorTypeAtSequenceNumber, aws.String(at)
	case cp != "":
		in.ShardIteratorType, in.StartingSequenceNumber = types.ShardIteratorTypeAfterSequenceNumber, aws.String(cp)
	default:
		in.ShardIteratorType = w.opt.Start
	}
	resp, err := w.opt.Client.GetShardIterator(w.hctx, in)
	if err != nil {
		return nil, err
	}
	if resp.ShardIterator == nil {
		return nil, errors.New("kinesis: no shard iterator")
	}
	return resp.ShardIterator, nil
}

// Message converts a Kinesis record into the message a consumer handles: its Body is the
// record's data, its ID the sequence number (for logs only), its Subject the stream's name, and
// its Header "partition-key", "sequence-number" and "shard-id". A sequence number is a place in
// the stream, not a fact: a producer that retries a PutRecord whose answer it lost writes the
// fact twice. Key the fact from the data.
func Message(r types.Record, stream, shard string) *consumer.Message {
	return &consumer.Message{
		Body:    r.Data,
		ID:      aws.ToString(r.SequenceNumber),
		Subject: stream,
		Header: map[string][]string{
			"partition-key":   {aws.ToString(r.PartitionKey)},
			"sequence-number": {aws.ToString(r.SequenceNumber)},
			"shard-id":        {shard},
		},
	}
}
