//go:build unix

package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/store/memstore"
)

// earlyAnswerUpstream is an upstream that answers each request as soon as it has its
// headers, then reads the body slowly, through a small receive buffer: the gateway's
// Transport is still sending the body after it has the whole answer, and goes on for a while
// (net/http waits up to 50ms for the body to be written before it gives up the connection).
// It records, per Idempotency-Key, the body bytes it received.
type earlyAnswerUpstream struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	bodys map[string][]byte
}

func newEarlyAnswerUpstream(t *testing.T) *earlyAnswerUpstream {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			// Inherited by accepted connections: a small window, so the sender blocks.
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &earlyAnswerUpstream{ln: ln, bodys: map[string][]byte{}}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				u.serve(c)
			}()
		}
	}()
	return u
}

func (u *earlyAnswerUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4<<10)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
		key := req.Header.Get("Idempotency-Key")
		var got []byte
		buf := make([]byte, 4<<10)
		for {
			n, err := req.Body.Read(buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
			time.Sleep(time.Millisecond)
		}
		u.mu.Lock()
		u.bodys[key] = append(u.bodys[key], got...)
		u.mu.Unlock()
		if int64(len(got)) != req.ContentLength {
			return // the gateway gave up the connection mid-body
		}
	}
}

// smallSendBuffer is the gateway's Transport with a small, fixed socket send buffer, so that
// the kernel cannot take a whole body at once and the Transport's writes wait for the upstream.
func smallSendBuffer() *http.Transport {
	tr := upstreamTransport()
	d := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4<<10)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	tr.DialContext = d.DialContext
	return tr
}

func (u *earlyAnswerUpstream) close() {
	u.ln.Close()
	u.wg.Wait()
}

// TestBodyOutlivesTheHandler checks that a request body the proxy's Transport goes on
// sending after the handler has returned is still that request's body. The upstream answers
// before it has read the body; the middleware completes the request and reuses its buffers
// for the next one while the Transport still reads. The gateway sets idemhttp's DetachBody
// for this: without it the race detector reports the reads (run with -race), and the upstream
// can receive bytes of another request's body.
func TestBodyOutlivesTheHandler(t *testing.T) {
	up := newEarlyAnswerUpstream(t)
	defer up.close()
	st := memstore.New()
	defer st.Close()
	g, err := New(context.Background(), Config{
		Upstream: "http://" + up.ln.Addr().String(), Scope: ScopeNone, MaxBody: 1 << 20,
	}, Options{Store: st, Logger: slog.New(slog.DiscardHandler), Transport: smallSendBuffer()})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g)
	defer srv.Close()

	const clients, rounds, size = 4, 3, 256 << 10
	var wg sync.WaitGroup
	errs := make(chan error, clients*rounds)
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range rounds {
				key := fmt.Sprintf("body-%d-%d", i, j)
				fill := byte('a' + (i*rounds+j)%26)
				req, _ := http.NewRequest("POST", srv.URL+"/orders", bytes.NewReader(bytes.Repeat([]byte{fill}, size)))
				req.Header.Set("Idempotency-Key", key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					errs <- err
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(b) != "ok" {
					errs <- fmt.Errorf("%s: %d %q", key, resp.StatusCode, b)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	srv.Close()
	g.Close()
	up.close()

	for i := range clients {
		for j := range rounds {
			key := fmt.Sprintf("body-%d-%d", i, j)
			fill := byte('a' + (i*rounds+j)%26)
			got := up.bodys[key]
			if len(got) > size {
				t.Errorf("%s: the upstream received %d bytes of a %d-byte body", key, len(got), size)
			}
			if k := bytes.IndexFunc(got, func(r rune) bool { return r != rune(fill) }); k >= 0 {
				t.Errorf("%s: byte %d of the body the upstream received is %q, not %q: another request's body", key, k, got[k], fill)
			}
		}
	}
}
