//go:build chaos

package chaos_test

import (
	"io"
	"net"
	"net/url"
	"sync"
	"time"
)

// storeRelay is a TCP relay between one gateway and the store server. hold makes it hold
// back, for a while, everything the store sends to that gateway, while the gateway's own
// bytes still go through: the store acts on what the gateway sends (a claim lands, an
// extension lands) and the gateway hears of it late, as over a congested link.
type storeRelay struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	until time.Time
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newStoreRelay(target string) (*storeRelay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &storeRelay{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

// Addr is the relay's address, for the gateway's store URL.
func (r *storeRelay) Addr() string { return r.ln.Addr().String() }

// hold holds back the store's answers to the gateway for d from now, and returns when that
// began and when it ends.
func (r *storeRelay) hold(d time.Duration) (from, to time.Time) {
	from = time.Now()
	to = from.Add(d)
	r.mu.Lock()
	r.until = to
	r.mu.Unlock()
	return from, to
}

func (r *storeRelay) heldUntil() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.until
}

func (r *storeRelay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", r.target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns[c], r.conns[s] = struct{}{}, struct{}{}
		r.mu.Unlock()
		r.wg.Add(2)
		go func() { // gateway → store: never held
			defer r.wg.Done()
			_, _ = io.Copy(s, c)
			r.drop(c, s)
		}()
		go func() { // store → gateway: held while a hold lasts
			defer r.wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 {
					if wait := time.Until(r.heldUntil()); wait > 0 {
						time.Sleep(wait)
					}
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			r.drop(c, s)
		}()
	}
}

// drop closes both ends of a relayed connection.
func (r *storeRelay) drop(c, s net.Conn) {
	c.Close()
	s.Close()
	r.mu.Lock()
	delete(r.conns, c)
	delete(r.conns, s)
	r.mu.Unlock()
}

// Close stops the relay and closes every connection it carries.
func (r *storeRelay) Close() {
	r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// viaRelay returns the store URL raw with its host replaced by the relay's address.
func viaRelay(raw, addr string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Host = addr
	return u.String()
}
