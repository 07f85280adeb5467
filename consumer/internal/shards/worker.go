// Package shards reads a sharded stream (Kinesis, DynamoDB Streams) for a consumer: shards
// shared by lease, each read in order from its checkpoint, parents read to their end before
// their children. The public adapters (consumer/kinesis, consumer/dynamostream) give it a
// Source.
package shards

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

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

// Options configure a Worker; every field is set by the adapter (defaults filled).
type Options struct {
	Name          string // the stream, for logs
	Checkpoints   Checkpoints
	PollInterval  time.Duration
	LeaseDuration time.Duration
	OnRejected    func(ctx context.Context, m *consumer.Message, r consumer.Result)
	Logger        *slog.Logger
	BeforeAck     func() bool // tests: true makes the worker behave as if killed before a checkpoint
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

// Start starts a worker; ctx's end stops it as Stop does.
func Start(ctx context.Context, c *consumer.Consumer, src Source, opt Options) *Worker {
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

// run lists the shards, claims the ones whose parents are read to their end, and starts a
// reader on each one claimed; every third of the lease it renews the claims and looks again.
func (w *Worker) run() {
	defer close(w.done)
	defer w.wg.Wait()
	readers := map[string]*reader{}
	for {
		if err := w.sync(readers); err != nil && !w.stopped() {
			w.opt.Logger.Warn("consumer: listing or claiming shards failed", "stream", w.opt.Name, "err", err)
		}
		if !w.sleep(w.opt.LeaseDuration / 3) {
			return
		}
	}
}

func (w *Worker) sync(readers map[string]*reader) error {
	ctx, cancel := context.WithTimeout(w.hctx, w.opt.LeaseDuration/3)
	defer cancel()
	shards, err := w.src.Shards(ctx)
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, s := range shards {
		known[s.ID] = true
	}
	until := time.Now().Add(w.opt.LeaseDuration)
	for _, s := range shards {
		if r := readers[s.ID]; r != nil {
			select {
			case <-r.done:
				delete(readers, s.ID)
			default:
				if _, held, err := w.opt.Checkpoints.Claim(ctx, s.ID, w.owner, until); err != nil || !held {
					r.lost.Store(true)
				}
				continue
			}
		}
		ready, err := w.parentsRead(ctx, s, known)
		if err != nil || !ready {
			continue
		}
		cp, held, err := w.opt.Checkpoints.Claim(ctx, s.ID, w.owner, until)
		if err != nil {
			return err
		}
		if !held || cp == ShardEnd || w.stopped() {
			continue
		}
		r := &reader{done: make(chan struct{})}
		readers[s.ID] = r
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			defer close(r.done)
			w.read(s.ID, cp, r)
		}()
	}
	return nil
}

// parentsRead reports whether every parent of s that the stream still lists is read to its
// end (a parent past the stream's retention is gone, and so are its records).
func (w *Worker) parentsRead(ctx context.Context, s Shard, known map[string]bool) (bool, error) {
	for _, p := range s.Parents {
		if p == "" || !known[p] {
			continue
		}
		cp, err := w.opt.Checkpoints.Checkpoint(ctx, p)
		if err != nil || cp != ShardEnd {
			return false, err
		}
	}
	return true, nil
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
