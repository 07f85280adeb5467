package faultproxy

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// HeadLen is how many bytes of an exchange's request an Event carries.
const HeadLen = 512

// Faults are the probabilities, per exchange, of each fault. The zero value injects nothing:
// the proxy then forwards bytes untouched.
type Faults struct {
	// DropRequest is the probability that a request is not forwarded: both connections are
	// closed as it arrives, so the target never sees it. Default 0.
	DropRequest float64
	// DropResponse is the probability that a request is forwarded but its response is not:
	// both connections are closed when the first byte of the answer arrives, so the target
	// has processed the request and the client never hears of it. Default 0.
	DropResponse float64
	// Delay is the probability that a request is held for a random time in (0, MaxDelay]
	// before it is forwarded. Default 0.
	Delay float64
	// MaxDelay bounds one delay. Default 100ms.
	MaxDelay time.Duration
}

func (f Faults) validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"DropRequest", f.DropRequest}, {"DropResponse", f.DropResponse}, {"Delay", f.Delay}} {
		if !(p.v >= 0 && p.v <= 1) { // also refuses NaN
			return fmt.Errorf("faultproxy: Faults.%s %v is not a probability in [0, 1]", p.name, p.v)
		}
	}
	if f.DropRequest+f.DropResponse > 1 {
		return fmt.Errorf("faultproxy: Faults.DropRequest + Faults.DropResponse = %v is above 1", f.DropRequest+f.DropResponse)
	}
	if f.MaxDelay < 0 {
		return fmt.Errorf("faultproxy: Faults.MaxDelay %s is negative", f.MaxDelay)
	}
	return nil
}

// Options configure a Proxy. Only Target is required.
type Options struct {
	// Target is the host:port the proxy forwards to. Required.
	Target string
	// Listen is the address the proxy listens on. Default "127.0.0.1:0" (a free loopback port).
	Listen string
	// Faults are the initial fault probabilities; SetFaults changes them. Default: none.
	Faults Faults
	// Seed seeds the fault dice, for a reproducible sequence of decisions (timing still varies).
	// Default 0: a random seed.
	Seed uint64
	// OnFault, if set, is called for every fault injected, from the connection's goroutine.
	// It must not block for long. Default nil.
	OnFault func(Event)
	// DialTimeout bounds a connection to Target. Default 5s.
	DialTimeout time.Duration
}

// Kind names a fault.
type Kind uint8

const (
	// KindDropRequest: a request was not forwarded; both connections were closed.
	KindDropRequest Kind = iota + 1
	// KindDropResponse: a request was forwarded and its response was cut off.
	KindDropResponse
	// KindDelay: a request was held before it was forwarded.
	KindDelay
	// KindCut: an open connection pair was closed by CutAll.
	KindCut
)

// String returns "drop_request", "drop_response", "delay", "cut" or "unknown".
func (k Kind) String() string {
	switch k {
	case KindDropRequest:
		return "drop_request"
	case KindDropResponse:
		return "drop_response"
	case KindDelay:
		return "delay"
	case KindCut:
		return "cut"
	}
	return "unknown"
}

// Event describes one injected fault.
type Event struct {
	// Kind is the fault.
	Kind Kind
	// At is when it was injected.
	At time.Time
	// Head is the start (up to HeadLen bytes) of the request of the exchange, so a test can
	// tell which request was hit (for HTTP: the request line and headers). Empty for KindCut.
	Head []byte
	// Delay is how long the request was held, for KindDelay.
	Delay time.Duration
}

// Stats counts what a Proxy did.
type Stats struct {
	// Conns is how many client connections were accepted.
	Conns int64
	// Exchanges is how many requests (client bytes after a response, or the first) were seen.
	Exchanges int64
	// DroppedRequests, DroppedResponses, Delays and Cuts count the faults injected.
	DroppedRequests, DroppedResponses, Delays, Cuts int64
}

// Proxy is a TCP proxy that injects faults at exchange boundaries. Create it with New; it is
// safe for concurrent use.
type Proxy struct {
	opt Options
	ln  net.Listener

	mu     sync.Mutex
	faults Faults
	rng    *rand.Rand
	pairs  map[*pair]struct{}
	closed bool

	wg sync.WaitGroup

	conns, exchanges, dropReq, dropResp, delays, cuts atomic.Int64
}

// ErrClosed is returned by methods of a closed Proxy.
var ErrClosed = errors.New("faultproxy: proxy is closed")

// New starts a proxy listening on opt.Listen and forwarding to opt.Target. It fails, naming
// the field, if an option is invalid, or if it cannot listen.
func New(opt Options) (*Proxy, error) {
	if opt.Target == "" {
		return nil, errors.New("faultproxy: Options.Target is empty")
	}
	if _, _, err := net.SplitHostPort(opt.Target); err != nil {
		return nil, fmt.Errorf("faultproxy: Options.Target %q is not host:port: %w", opt.Target, err)
	}
	if err := opt.Faults.validate(); err != nil {
		return nil, err
	}
	opt.Listen = cmp.Or(opt.Listen, "127.0.0.1:0")
	opt.DialTimeout = cmp.Or(opt.DialTimeout, 5*time.Second)
	if opt.DialTimeout < 0 {
		return nil, fmt.Errorf("faultproxy: Options.DialTimeout %s is negative", opt.DialTimeout)
	}
	seed := opt.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	ln, err := net.Listen("tcp", opt.Listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{opt: opt, ln: ln, faults: opt.Faults, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), pairs: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the host:port the proxy listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetFaults replaces the fault probabilities for exchanges that start from now on.
func (p *Proxy) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return err
	}
	p.mu.Lock()
	p.faults = f
	p.mu.Unlock()
	return nil
}

// CutAll closes every open connection pair at once, as a network blip would, and returns how
// many it closed. New connections are accepted as before.
func (p *Proxy) CutAll() int {
	p.mu.Lock()
	pairs := make([]*pair, 0, len(p.pairs))
	for c := range p.pairs {
		pairs = append(pairs, c)
	}
	p.mu.Unlock()
	for _, c := range pairs {
		c.close()
		p.cuts.Add(1)
		p.emit(Event{Kind: KindCut, At: time.Now()})
	}
	return len(pairs)
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	return Stats{
		Conns: p.conns.Load(), Exchanges: p.exchanges.Load(),
		DroppedRequests: p.dropReq.Load(), DroppedResponses: p.dropResp.Load(),
		Delays: p.delays.Load(), Cuts: p.cuts.Load(),
	}
}

// Close stops listening, closes every open connection and waits for the proxy's goroutines.
// It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	pairs := make([]*pair, 0, len(p.pairs))
	for c := range p.pairs {
		pairs = append(pairs, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range pairs {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) emit(ev Event) {
	if p.opt.OnFault != nil {
		p.opt.OnFault(ev)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		p.conns.Add(1)
		p.wg.Add(1)
		go p.serve(c)
	}
}

// pair is one client connection and its connection to the target.
type pair struct {
	client, target net.Conn
	once           sync.Once

	mu         sync.Mutex
	inRequest  bool   // the client has sent bytes since the last response began
	dropAnswer bool   // the current exchange's response is to be cut off
	head       []byte // the current exchange's request head
}

func (c *pair) close() {
	c.once.Do(func() {
		// Reset rather than a graceful FIN where possible: a dropped connection, not a polite one.
		for _, x := range []net.Conn{c.client, c.target} {
			if x == nil {
				continue
			}
			if tc, ok := x.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = x.Close()
		}
	})
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	target, err := net.DialTimeout("tcp", p.opt.Target, p.opt.DialTimeout)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &pair{client: client, target: target}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	p.pairs[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.pairs, c)
		p.mu.Unlock()
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.answers(c)
	}()
	if !p.requests(c) {
		c.close()
	}
	<-done
}

// decide rolls the dice for a new exchange.
func (p *Proxy) decide() (k Kind, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.faults
	r := p.rng.Float64()
	switch {
	case r < f.DropRequest:
		return KindDropRequest, 0
	case r < f.DropRequest+f.DropResponse:
		k = KindDropResponse
	}
	if f.Delay > 0 && p.rng.Float64() < f.Delay {
		maxDelay := cmp.Or(f.MaxDelay, 100*time.Millisecond)
		delay = time.Duration(p.rng.Int64N(int64(maxDelay))) + 1
	}
	return k, delay
}

// requests copies client bytes to the target, deciding each exchange's fate as it begins. It
// returns true when the client half-closed and the answer may still flow back.
func (p *Proxy) requests(c *pair) bool {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			c.mu.Lock()
			start := !c.inRequest
			c.inRequest = true
			c.mu.Unlock()
			if start {
				p.exchanges.Add(1)
				head := append([]byte(nil), buf[:min(n, HeadLen)]...)
				kind, delay := p.decide()
				if kind == KindDropRequest {
					p.dropReq.Add(1)
					p.emit(Event{Kind: KindDropRequest, At: time.Now(), Head: head})
					return false
				}
				if delay > 0 {
					p.delays.Add(1)
					p.emit(Event{Kind: KindDelay, At: time.Now(), Head: head, Delay: delay})
					time.Sleep(delay)
				}
				c.mu.Lock()
				c.dropAnswer = kind == KindDropResponse
				c.head = head
				c.mu.Unlock()
			}
			if _, werr := c.target.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				// The client half-closed: pass it on, and let the answer finish.
				if tc, ok := c.target.(*net.TCPConn); ok && tc.CloseWrite() == nil {
					return true
				}
			}
			return false
		}
	}
}

// answers copies target bytes to the client, cutting off a response marked for dropping.
func (p *Proxy) answers(c *pair) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.target.Read(buf)
		if n > 0 {
			c.mu.Lock()
			begins := c.inRequest
			c.inRequest = false
			drop := begins && c.dropAnswer
			head := c.head
			c.dropAnswer = false
			c.mu.Unlock()
			if drop {
				p.dropResp.Add(1)
				p.emit(Event{Kind: KindDropResponse, At: time.Now(), Head: head})
				c.close()
				return
			}
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				c.close()
				return
			}
		}
		if err != nil {
			c.close()
			return
		}
	}
}
