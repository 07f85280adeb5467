package pgstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem"
)

// maxGroup bounds the calls one group transaction carries, and maxGroupBytes the responses
// its completions carry (a transaction takes more calls only while under both).
const (
	maxGroup      = 64
	maxGroupBytes = 1 << 20
)

// groupOp is one Reserve or Complete waiting for, or carried by, a group transaction.
type groupOp struct {
	ctx      context.Context
	complete bool // Complete; else Reserve
	key      string
	args     []any // the statement's parameters, in queries' order
	tries    int   // Reserve: runs that found neither a claim nor a record (see reserveRetries)
	again    bool  // Reserve: this run found neither, run it again
	size     int   // Complete: the encoded response's length

	// state says who owns the call: opQueued until a worker takes it (opTaken), or its
	// caller gives up on it first (opAbandoned: it is never sent).
	state atomic.Int32
	res   idem.Reservation // Reserve's answer
	err   error
	done  chan struct{} // closed once res and err are final
}

const (
	opQueued int32 = iota
	opTaken
	opAbandoned
)

// finish hands the op its outcome.
func (op *groupOp) finish(err error) {
	op.err = err
	close(op.done)
}

// group runs Reserve and Complete calls made at the same time in shared transactions (group
// commit): Options.GroupCommit workers each take every call waiting (up to maxGroup), send
// their statements in one pipeline on one connection, and commit them together. A call that
// finds a worker idle runs at once, alone, so grouping adds no wait when the store is not
// busy; under load a transaction carries many calls, and PostgreSQL's per-statement and
// per-commit work, and the round trips, are shared among them.
type group struct {
	s     *Store
	ops   chan *groupOp
	quit  chan struct{} // closed by Close: workers stop taking calls
	wg    sync.WaitGroup
	stats groupStats
}

// groupStats counts what the workers did, for tests.
type groupStats struct {
	mu           sync.Mutex
	transactions int
	calls        int
	largest      int
}

func newGroup(s *Store, workers int) *group {
	g := &group{s: s, ops: make(chan *groupOp, 4*maxGroup), quit: make(chan struct{})}
	g.wg.Add(workers)
	for range workers {
		go g.work()
	}
	return g
}

// close stops the workers once the transactions in flight have ended (each bounded by its
// calls' deadlines, as a statement of its own would be) and lets go of the calls not yet
// taken, which get idem.ErrClosed.
func (g *group) close() {
	close(g.quit)
	g.wg.Wait()
	for {
		select {
		case op := <-g.ops:
			if op.state.CompareAndSwap(opQueued, opAbandoned) {
				op.finish(idem.ErrClosed)
			}
		default:
			return
		}
	}
}

// call queues op and waits for its outcome. A call whose context ends, or whose store closes,
// before a worker took it is never sent, and returns the context's error (or idem.ErrClosed). One
// whose context ends once its statement was sent returns the context's error too, but the
// statement may still commit, as when a deadline interrupts a statement of its own.
func (g *group) call(op *groupOp) error {
	op.done = make(chan struct{})
	select {
	case g.ops <- op:
	case <-g.quit:
		return idem.ErrClosed
	case <-op.ctx.Done():
		return op.ctx.Err()
	}
	select {
	case <-op.done:
		return op.err
	case <-op.ctx.Done():
		if op.state.CompareAndSwap(opQueued, opAbandoned) {
			return op.ctx.Err() // never sent
		}
	case <-g.quit:
		if op.state.CompareAndSwap(opQueued, opAbandoned) {
			return idem.ErrClosed // never sent
		}
	}
	// In a transaction: its outcome, unless the context ends first.
	select {
	case <-op.done:
		return op.err
	case <-op.ctx.Done():
		select { // an outcome that is there wins
		case <-op.done:
			return op.err
		default:
			return op.ctx.Err()
		}
	}
}

func (g *group) work() {
	defer g.wg.Done()
	batch := make([]*groupOp, 0, maxGroup)
	for {
		select {
		case <-g.quit:
			return
		case op := <-g.ops:
			select {
			case <-g.quit: // closed meanwhile: close lets go of the queued calls, this one too
				if op.state.CompareAndSwap(opQueued, opAbandoned) {
					op.finish(idem.ErrClosed)
				}
				return
			default:
			}
			batch = append(batch[:0], op)
		}
		size := batch[0].size
	more:
		for len(batch) < maxGroup && size < maxGroupBytes {
			select {
			case op := <-g.ops:
				batch = append(batch, op)
				size += op.size
			default:
				break more
			}
		}
		for len(batch) > 0 {
			batch = g.run(batch) // the calls to run again
		}
	}
}

// run executes batch's statements in one transaction and hands each call its outcome; it
// returns the Reserve calls to run again (their statement found neither a claim nor a record:
// the race described at queries.reserve) and, in the partitioned layout, every call of a
// transaction that found a partition dropped, in batch's backing array.
//
// The statements go in key order, so two transactions never wait on each other's rows in
// opposite orders (no deadlock). Outcomes are handed out only after the commit: a claim is
// never reported before it is durable, and when any statement fails the transaction rolls back
// and every call gets the error.
func (g *group) run(batch []*groupOp) []*groupOp {
	live := batch[:0]
	for _, op := range batch {
		// Its caller may have given up on it (then it is not sent); a call run again is taken.
		if op.state.Load() == opTaken || op.state.CompareAndSwap(opQueued, opTaken) {
			live = append(live, op)
		}
	}
	if len(live) == 0 {
		return nil
	}
	// Key order; for one key, claims before completions: in the partitioned layout a claim
	// takes the key's claim lock before its row, so a transaction that completed the key
	// (holding its row) must not then wait for its claim lock.
	slices.SortStableFunc(live, func(a, b *groupOp) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(boolInt(a.complete), boolInt(b.complete)))
	})
	ctx, cancel := g.batchContext(live)
	defer cancel()
	p := g.s.part
	if p != nil {
		live = g.ensurePartitions(ctx, live)
		if len(live) == 0 {
			return nil
		}
	}

	var b pgx.Batch
	for _, op := range live {
		switch {
		case op.complete:
			b.Queue(g.s.q.complete, op.args...)
		case p != nil:
			b.Queue(p.lockSQL, op.key)
			b.Queue(p.claimSQL(p.bucket(op.args[2].(int64))), op.args...)
		default:
			b.Queue(g.s.q.reserve, op.args...)
		}
	}
	br := g.s.pool.SendBatch(ctx, &b)
	var err error
	for _, op := range live {
		op.again, op.err = false, nil
		if op.complete {
			var tag pgconn.CommandTag
			if tag, err = br.Exec(); err == nil && tag.RowsAffected() == 0 {
				op.err = idem.ErrLeaseLost
			}
		} else {
			if p != nil {
				_, err = br.Exec() // the claim lock
			}
			if err == nil {
				op.again, op.err, err = scanReservation(br.QueryRow(), op.key, &op.res)
			}
		}
		if err != nil {
			break // the server's error, or the connection's: the transaction is lost
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	g.count(len(live))
	if p != nil && isUndefinedTable(err) {
		// A partition was dropped since this process last saw it (its clock is far behind
		// the dropper's). The transaction rolled back, so nothing of it happened: run every
		// call again, once the next run has created the partitions.
		for _, op := range live {
			if !op.complete {
				p.forget(p.bucket(op.args[2].(int64)))
			}
		}
		err = nil
		for _, op := range live {
			op.again, op.err = true, nil
		}
	}
	rerun := batch[:0]
	for _, op := range live {
		switch {
		case err != nil:
			op.finish(err)
		case op.again:
			if op.tries++; op.tries >= reserveRetries {
				op.finish(errNeither(op.key))
				continue
			}
			rerun = append(rerun, op)
		default:
			op.finish(op.err)
		}
	}
	return rerun
}

// scanReservation reads a Reserve statement's row into res. again reports the race in which
// the statement found neither a claim nor a record and must run again; recErr, a record that
// cannot be decoded (its own call's error, not its transaction's); err, the statement's.
func scanReservation(row pgx.Row, key string, res *idem.Reservation) (again bool, recErr, err error) {
	var sc scan
	rec := &res.Record
	err = row.Scan(append([]any{&res.Claimed}, sc.dest(rec)...)...)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	rec.Key = key
	if recErr = sc.finish(rec); recErr == nil {
		res.Takeover = res.Claimed && rec.Attempts > 1
	}
	return false, recErr, nil
}

// batchContext bounds a transaction by the latest deadline of its calls (none if a call has
// none). It carries no cancellation: a caller that gives up leaves the others their
// transaction.
func (g *group) batchContext(ops []*groupOp) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, op := range ops {
		d, ok := op.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

func (g *group) count(calls int) {
	g.stats.mu.Lock()
	g.stats.transactions++
	g.stats.calls += calls
	g.stats.largest = max(g.stats.largest, calls)
	g.stats.mu.Unlock()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ensurePartitions creates, in the partitioned layout, the partitions the claims of live write
// into, unless this process knows they exist; a claim whose partition cannot be created gets
// that error. It returns the calls to send, in live's backing array.
func (g *group) ensurePartitions(ctx context.Context, live []*groupOp) []*groupOp {
	p := g.s.part
	failed := map[int64]error{}
	out := live[:0]
	for _, op := range live {
		if !op.complete {
			b := p.bucket(op.args[2].(int64))
			err, seen := failed[b]
			if !seen {
				err = p.ensureKnown(ctx, b)
				failed[b] = err
			}
			if err != nil {
				op.finish(err)
				continue
			}
		}
		out = append(out, op)
	}
	return out
}
