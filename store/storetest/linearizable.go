package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// LinearizabilityOptions size a linearizability check.
type LinearizabilityOptions struct {
	// Clients is how many goroutines issue operations at once. Default 8.
	Clients int
	// OpsPerClient is how many operations each client issues. Default 60.
	OpsPerClient int
	// Keys is how many keys the operations spread over. Default 4.
	Keys int
	// Timeout bounds the checker. Default 60s.
	Timeout time.Duration
}

// op kinds of the contract model.
const (
	opReserve = iota
	opComplete
	opRelease
	opExtend
	opGet
)

type linInput struct {
	key   string
	kind  int
	fp    string
	token int64
	now   int64 // Unix microseconds
	until int64 // Complete: expires_at; Extend: lease until
}

type linOutput struct {
	err      string // "", "lease_lost", "not_found"
	claimed  bool
	takeover bool
	rec      linState
}

// linState is the model's record for one key; comparable, so porcupine can cache states.
type linState struct {
	exists   bool
	fp       string
	state    idem.State
	token    int64
	lease    int64
	expires  int64
	attempts int
	status   int
}

const (
	linLease = int64(10 * time.Second / time.Microsecond)
	linTTL   = 8 * linLease
)

func (s linState) released() bool { return s.exists && s.expires == 0 }

// linModel is the storage contract as a sequential specification.
var linModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range h {
			k := o.Input.(linInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], o)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return linState{} },
	Step: func(st, in, out any) (bool, any) {
		s, i, o := st.(linState), in.(linInput), out.(linOutput)
		held := s.exists && s.state == idem.StateInProgress && s.token == i.token && !s.released()
		switch i.kind {
		case opReserve:
			now := time.UnixMicro(i.now)
			switch {
			case !s.exists || s.expires <= i.now:
				prev := s.token
				n := linState{exists: true, fp: i.fp, state: idem.StateInProgress, token: storekit.NextToken(prev, now),
					lease: i.now + linLease, expires: i.now + linTTL, attempts: 1}
				return o.err == "" && o.claimed && !o.takeover && o.rec == n, n
			case s.state == idem.StateInProgress && s.lease <= i.now && s.fp == i.fp:
				n := s
				n.token, n.lease, n.expires, n.attempts = storekit.NextToken(s.token, now), i.now+linLease, i.now+linTTL, s.attempts+1
				return o.err == "" && o.claimed && o.takeover && o.rec == n, n
			default:
				return o.err == "" && !o.claimed && o.rec == s, s
			}
		case opComplete:
			if !held {
				return o.err == "lease_lost", s
			}
			n := s
			n.state, n.expires, n.status = idem.StateCompleted, i.until, 200
			return o.err == "", n
		case opRelease:
			if !held {
				return o.err == "lease_lost", s
			}
			n := s
			n.expires, n.lease = 0, 0
			return o.err == "", n
		case opExtend:
			if !held {
				return o.err == "lease_lost", s
			}
			n := s
			n.lease, n.expires = i.until, max(s.expires, i.until)
			return o.err == "", n
		case opGet:
			if !s.exists || (s.released() && o.err == "not_found") {
				return o.err == "not_found", s
			}
			return o.err == "" && o.rec == s, s
		}
		return false, s
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(linInput), out.(linOutput)
		name := [...]string{"reserve", "complete", "release", "extend", "get"}[i.kind]
		return fmt.Sprintf("%s(%s tok=%d now=%d) → %s claimed=%v takeover=%v %+v", name, i.key, i.token, i.now, o.err, o.claimed, o.takeover, o.rec)
	},
}

func toLin(r idem.Record) linState {
	s := linState{exists: true, fp: r.Fingerprint, state: r.State, token: r.Token,
		lease: r.LeaseUntil.UnixMicro(), expires: r.ExpiresAt.UnixMicro(), attempts: r.Attempts}
	if s.expires <= 0 {
		s.expires, s.lease = 0, 0 // a released record, however the store spells the epoch
	}
	if r.Response != nil {
		s.status = r.Response.Status
	}
	return s
}

func linErr(err error) (string, error) {
	switch {
	case err == nil:
		return "", nil
	case errors.Is(err, idem.ErrLeaseLost):
		return "lease_lost", nil
	case errors.Is(err, idem.ErrNotFound):
		return "not_found", nil
	}
	return "", err
}

// CheckLinearizable runs concurrent Reserve, Complete, Release, Extend and Get operations on
// a few keys of st (all prefixed with prefix) and checks with porcupine that the history is
// linearizable with respect to the storage contract. It returns porcupine's verdict, a
// description of the history when it is not linearizable, and any unexpected store error.
func CheckLinearizable(st idem.Store, prefix string, opt LinearizabilityOptions) (porcupine.CheckResult, string, error) {
	opt.Clients = max(opt.Clients, 0)
	if opt.Clients == 0 {
		opt.Clients = 8
	}
	if opt.OpsPerClient == 0 {
		opt.OpsPerClient = 60
	}
	if opt.Keys == 0 {
		opt.Keys = 4
	}
	if opt.Timeout == 0 {
		opt.Timeout = 60 * time.Second
	}
	base := time.Now().Truncate(time.Second).UnixMicro()
	fps := []string{idem.Fingerprint([]byte("x")), idem.Fingerprint([]byte("y"))}
	start := time.Now()
	var mu sync.Mutex
	var history []porcupine.Operation
	var firstErr error
	var wg sync.WaitGroup
	for c := range opt.Clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), uint64(base)))
			tokens := map[string][]int64{}
			for range opt.OpsPerClient {
				key := fmt.Sprintf("%slin-%d", prefix, rng.IntN(opt.Keys))
				// Times spread over ten leases, so takeovers and expiries happen.
				in := linInput{key: key, kind: rng.IntN(5), now: base + rng.Int64N(10*linLease)}
				if rng.IntN(3) == 0 {
					in.kind = opReserve
				}
				in.fp = fps[min(rng.IntN(5), 1)]
				if ts := tokens[key]; len(ts) > 0 {
					in.token = ts[len(ts)-1]
					if rng.IntN(4) == 0 {
						in.token = ts[rng.IntN(len(ts))]
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				call := time.Since(start).Nanoseconds()
				var out linOutput
				var err error
				now := time.UnixMicro(in.now)
				switch in.kind {
				case opReserve:
					var res idem.Reservation
					res, err = st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: in.fp, Now: now, Lease: time.Duration(linLease) * time.Microsecond, TTL: time.Duration(linTTL) * time.Microsecond})
					if err == nil {
						out = linOutput{claimed: res.Claimed, takeover: res.Takeover, rec: toLin(res.Record)}
						if res.Claimed {
							tokens[key] = append(tokens[key], res.Record.Token)
						}
					}
				case opComplete:
					in.until = in.now + linTTL
					err = st.Complete(ctx, key, in.token, idem.Response{Status: 200}, now, time.UnixMicro(in.until))
				case opRelease:
					err = st.Release(ctx, key, in.token)
				case opExtend:
					in.until = in.now + linLease
					err = st.Extend(ctx, key, in.token, time.UnixMicro(in.until))
				case opGet:
					var rec idem.Record
					rec, err = st.Get(ctx, key)
					if err == nil {
						out.rec = toLin(rec)
					}
				}
				ret := time.Since(start).Nanoseconds()
				cancel()
				out.err, err = linErr(err)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("%s on %s: %w", [...]string{"reserve", "complete", "release", "extend", "get"}[in.kind], key, err)
				}
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return porcupine.Unknown, "", firstErr
	}
	res, info := porcupine.CheckOperationsVerbose(linModel, history, opt.Timeout)
	if res == porcupine.Illegal {
		return res, describeIllegal(info), nil
	}
	return res, "", nil
}

// describeIllegal lists the longest linearizable prefix of the failing partition.
func describeIllegal(info porcupine.LinearizationInfo) string {
	parts := info.PartialLinearizationsOperations()
	out := ""
	for _, p := range parts {
		if len(p) == 0 {
			continue
		}
		lin := p[0]
		out += fmt.Sprintf("partial linearization of %d operations:\n", len(lin))
		for _, o := range lin[max(0, len(lin)-8):] {
			out += "  " + linModel.DescribeOperation(o.Input, o.Output) + "\n"
		}
	}
	return out
}

func (s suite) linearizable(t *testing.T, b *bundle) {
	res, why, err := CheckLinearizable(b.store, b.prefix, LinearizabilityOptions{})
	if err != nil {
		t.Fatalf("store error during the linearizability run: %v", err)
	}
	switch res {
	case porcupine.Ok:
	case porcupine.Unknown:
		t.Fatalf("linearizability check timed out")
	default:
		t.Fatalf("history is not linearizable with respect to the storage contract:\n%s", why)
	}
}
