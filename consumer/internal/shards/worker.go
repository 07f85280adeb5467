// Package shards reads a sharded stream (Kinesis, DynamoDB Streams) for a consumer: shards
// shared by lease, each read in order from its checkpoint, parents read to their end before
// their children. The public adapters (consumer/kinesis, consumer/dynamostream) give it a
// Source.
package shards

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
)

// Shard is one shard of a stream and the shards it was split or merged from.
type Shard struct {
	ID      string
	Parents []string
}

// Record is one record read from a shard.
type Record struct {
	Seq string
	Msg *consumer.Message
}

// Batch is what one read of a shard returned.
type Batch struct {
	Records []Record
	// Next is the iterator of the next read; "" when the shard is closed and read to its end.
	Next string
	// Behind reports that more records are there to read at once.
	Behind bool
}

// Position is where an iterator starts: at a record (At), after one (After), or, both empty,
// where a shard without a checkpoint starts.
type Position struct{ At, After string }

// Source is the stream's API.
type Source interface {
	Shards(ctx context.Context) ([]Shard, error)
	Iterator(ctx context.Context, shard string, pos Position) (string, error)
	Read(ctx context.Context, shard, iter string) (Batch, error)
}

// Options configure a Worker: the options every adapter shares, as the user set them (Check
// validates them, Start fills the defaults).
type Options struct {
	Name          string        // the stream, for logs
	Checkpoints   Checkpoints   // default NewMemoryCheckpoints()
	Start         string        // TRIM_HORIZON or LATEST; default TRIM_HORIZON (used by the Source)
	Limit         int32         // the most records one read returns; default 100 (used by the Source)
	PollInterval  time.Duration // default 1s
	LeaseDuration time.Duration // default 30s
	OnRejected    func(ctx context.Context, m *consumer.Message, r consumer.Result)
	Logger        *slog.Logger // default slog.Default()
	BeforeAck     func() bool  // tests: true makes the worker behave as if killed before a checkpoint
}

// Check validates the options; pkg names the adapter in the error, an *idem.OptionError.
func (o Options) Check(pkg string) error {
	bad := func(field, problem string) error {
		return &idem.OptionError{Package: pkg, Field: "Options." + field, Problem: problem}
	}
	switch {
	case o.Limit < 0:
		return bad("Limit", fmt.Sprintf("%d is negative", o.Limit))
	case o.PollInterval < 0:
		return bad("PollInterval", o.PollInterval.String()+" is negative")
	case o.LeaseDuration < 0:
		return bad("LeaseDuration", o.LeaseDuration.String()+" is negative")
	case o.Start != "" && o.Start != "TRIM_HORIZON" && o.Start != "LATEST":
		return bad("Start", fmt.Sprintf("%q is neither TRIM_HORIZON nor LATEST", o.Start))
	}
	return nil
}

// WithDefaults returns the options with every field left zero set to its default.
func (o Options) WithDefaults() Options {
	if o.Checkpoints == nil {
		o.Checkpoints = NewMemoryCheckpoints()
	}
	o.Start = cmp.Or(o.Start, "TRIM_HORIZON")
	o.Limit = cmp.Or(o.Limit, 100)
	o.PollInterval = cmp.Or(o.PollInterval, time.Second)
	o.LeaseDuration = cmp.Or(o.LeaseDuration, 30*time.Second)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	return o
}

// Worker reads every shard it holds the lease of and hands each record to a consumer.
type Worker struct {
	c      *consumer.Consumer
	src    Source
	opt    Options
	owner  string
	stop   chan struct{} // closed by Stop or Kill: take nothing new
	done   chan struct{} // closed when every reader has returned
	killed atomic.Bool
	once   sync.Once
	hctx   context.Context // the handlers' context: cancelled only by Kill
	kill   context.CancelFunc
	wg     sync.WaitGroup
}

// Start starts a worker with opt (defaults filled); ctx's end stops it as Stop does.
func Start(ctx context.Context, c *consumer.Consumer, src Source, opt Options) *Worker {
	opt = opt.WithDefaults()
	var id [8]byte
	_, _ = rand.Read(id[:])
	w := &Worker{c: c, src: src, opt: opt, owner: hex.EncodeToString(id[:]), stop: make(chan struct{}), done: make(chan struct{})}
	w.hctx, w.kill = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-ctx.Done():
			w.Stop()
		case <-w.done:
		}
	}()
	go w.run()
	return w
}

// Stop takes no new record, finishes the ones under way and returns when stopped.
func (w *Worker) Stop() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

// Kill stops at once, as a process killed: no checkpoint is saved from now on.
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

// run lists the shards, claims its share of the ones whose parents are read to their end,
// and starts a reader on each one claimed; every third of the lease it renews the claims and
// looks again. When the worker stops (not killed), it gives up the leases it holds so that
// the other workers read on at once.
func (w *Worker) run() {
	defer close(w.done)
	readers := map[string]*reader{}
	for {
		if err := w.sync(readers); err != nil && !w.stopped() {
			w.opt.Logger.Warn("consumer: listing or claiming shards failed", "stream", w.opt.Name, "err", err)
		}
		if !w.sleep(w.opt.LeaseDuration / 3) {
			break
		}
	}
	w.wg.Wait()
	if w.killed.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(w.hctx, w.opt.LeaseDuration/3)
	defer cancel()
	for id := range readers {
		if _, _, err := w.opt.Checkpoints.Claim(ctx, id, w.owner, time.Time{}); err != nil {
			w.opt.Logger.Warn("consumer: giving up a shard's lease failed; it runs out after the lease duration", "stream", w.opt.Name, "shard", id, "err", err)
		}
	}
}

// sync renews the leases of the shards read, and claims shards up to this worker's share:
// the shards not read to their end, divided by the workers that hold a lease (this one
// included). A worker under its share takes a free shard, or, with none free, one shard of the
// worker that holds the most when that one holds at least two more than it.
func (w *Worker) sync(readers map[string]*reader) error {
	ctx, cancel := context.WithTimeout(w.hctx, w.opt.LeaseDuration/3)
	defer cancel()
	list, err := w.src.Shards(ctx)
	if err != nil {
		return err
	}
	leases, err := w.opt.Checkpoints.Leases(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	until := now.Add(w.opt.LeaseDuration)
	byShard := map[string]Lease{}
	for _, l := range leases {
		byShard[l.Shard] = l
	}
	known := map[string]bool{}
	for _, s := range list {
		known[s.ID] = true
	}
	// The shards that can be read now, and who holds them.
	var open []Shard
	held := map[string][]string{} // owner → shards held
	for _, s := range list {
		l := byShard[s.ID]
		if l.Checkpoint == ShardEnd || !parentsRead(s, known, byShard) {
			continue
		}
		open = append(open, s)
		if l.Live(now) && l.Owner != w.owner {
			held[l.Owner] = append(held[l.Owner], s.ID)
		}
	}
	mine := 0
	for id, r := range readers {
		select {
		case <-r.done:
			delete(readers, id)
			continue
		default:
		}
		if _, ok, err := w.opt.Checkpoints.Claim(ctx, id, w.owner, until); err != nil || !ok {
			r.lost.Store(true)
			continue
		}
		mine++
	}
	if w.stopped() {
		return nil
	}
	share := (len(open) + len(held)) / (len(held) + 1) // ⌈open / workers⌉
	for _, s := range open {
		if mine >= share {
			break
		}
		if readers[s.ID] != nil || byShard[s.ID].Live(now) && byShard[s.ID].Owner != w.owner {
			continue
		}
		cp, ok, err := w.opt.Checkpoints.Claim(ctx, s.ID, w.owner, until)
		if err != nil {
			return err
		}
		if ok && cp != ShardEnd {
			w.startReader(readers, s.ID, cp)
			mine++
		}
	}
	if mine >= share {
		return nil
	}
	most := ""
	for owner, ids := range held {
		if most == "" || len(ids) > len(held[most]) {
			most = owner
		}
	}
	if most == "" || len(held[most]) < mine+2 {
		return nil
	}
	id := held[most][0]
	cp, ok, err := w.opt.Checkpoints.Take(ctx, id, most, w.owner, until)
	if err != nil {
		return err
	}
	if ok && cp != ShardEnd {
		w.startReader(readers, id, cp)
	}
	return nil
}

func (w *Worker) startReader(readers map[string]*reader, id, cp string) {
	r := &reader{done: make(chan struct{})}
	readers[id] = r
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer close(r.done)
		w.read(id, cp, r)
	}()
}

// parentsRead reports whether every parent of s that the stream still lists is read to its
// end (a parent past the stream's retention is gone, and so are its records).
func parentsRead(s Shard, known map[string]bool, leases map[string]Lease) bool {
	for _, p := range s.Parents {
		if p != "" && known[p] && leases[p].Checkpoint != ShardEnd {
			return false
		}
	}
	return true
}

// read reads shard id from checkpoint cp on, until the worker stops, the lease is lost or the
// shard ends.
func (w *Worker) read(id, cp string, r *reader) {
	at := "" // a record to read again from (after a failure)
	iter := ""
	for !w.stopped() && !r.lost.Load() {
		if iter == "" {
			var err error
			if iter, err = w.src.Iterator(w.hctx, id, Position{At: at, After: cp}); err != nil {
				w.opt.Logger.Warn("consumer: getting a shard iterator failed", "stream", w.opt.Name, "shard", id, "err", err)
				iter = ""
				if !w.sleep(w.opt.PollInterval) {
					return
				}
				continue
			}
		}
		b, err := w.src.Read(w.hctx, id, iter)
		if err != nil {
			w.opt.Logger.Warn("consumer: reading a shard failed", "stream", w.opt.Name, "shard", id, "err", err)
			iter = ""
			if !w.sleep(w.opt.PollInterval) {
				return
			}
			continue
		}
		if len(b.Records) > 0 && !w.renew(id, r) {
			return
		}
		retry := time.Duration(-1)
		for _, rec := range b.Records {
			if w.killed.Load() || r.lost.Load() {
				return
			}
			res := w.c.Handle(w.hctx, rec.Msg)
			switch {
			case res.Outcome.Ack():
			case res.Outcome == consumer.OutcomeRejected:
				w.opt.Logger.Warn("consumer: record rejected; the checkpoint moves past it", "stream", w.opt.Name, "shard", id, "sequence_number", rec.Seq, "err", res.Err)
				if w.opt.OnRejected != nil {
					w.opt.OnRejected(w.hctx, rec.Msg, res)
				}
			default:
				retry, at = max(res.RetryAfter, w.opt.PollInterval), rec.Seq
			}
			if retry >= 0 {
				break
			}
			if w.opt.BeforeAck != nil && w.opt.BeforeAck() {
				w.Kill()
				return
			}
			if !w.save(id, rec.Seq, r) {
				return
			}
			cp = rec.Seq
		}
		if retry >= 0 {
			iter = ""
			if !w.sleep(retry) {
				return
			}
			continue
		}
		at = ""
		if b.Next == "" { // the shard is closed and read to its end
			w.save(id, ShardEnd, r)
			return
		}
		iter = b.Next
		if len(b.Records) == 0 && !b.Behind && !w.sleep(w.opt.PollInterval) {
			return
		}
	}
}

// renew renews the shard's lease before a batch is handled, so that a worker whose shard was
// taken over (Take) or whose lease ran out stops before it handles another record: two workers
// handle at most the one record under way at the instant of a take-over concurrently, and the
// idem store makes that one's effect happen once. It reports whether the reader goes on; when
// the checkpoints cannot be reached, it goes on (the lease is renewed by the next sync, or
// lost there).
func (w *Worker) renew(id string, r *reader) bool {
	if w.killed.Load() {
		return false
	}
	ctx, cancel := context.WithTimeout(w.hctx, w.opt.LeaseDuration/3)
	defer cancel()
	_, held, err := w.opt.Checkpoints.Claim(ctx, id, w.owner, time.Now().Add(w.opt.LeaseDuration))
	if err != nil {
		w.opt.Logger.Warn("consumer: renewing a shard's lease failed", "stream", w.opt.Name, "shard", id, "err", err)
		return true
	}
	if !held {
		r.lost.Store(true)
	}
	return held
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
		w.opt.Logger.Warn("consumer: saving a checkpoint failed", "stream", w.opt.Name, "shard", id, "err", err)
		return true
	}
	if !held {
		r.lost.Store(true)
	}
	return held
}
