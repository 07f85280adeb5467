package clientcompat_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/chaos/faultproxy"
)

// binary is the idem command, built once.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-clientcompat-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "idem")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/idemkit/idem/cmd/idem").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building idem: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// apiKey is the tenant header every client sends; the gateway scopes keys by it.
const apiKey = "X-API-Key"

// upstream is the API behind the gateway: each charge takes delay, is counted per operation,
// and answers with a fresh charge id, so a re-execution shows in the count and in the body.
type upstream struct {
	delay   time.Duration
	mu      sync.Mutex
	effects map[string]int
	seq     atomic.Int64
	started chan string // an operation reached the upstream (buffered; never blocks)
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct{ Op string }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Op == "" {
		http.Error(w, `{"error":"want {\"op\": ...}"}`, http.StatusBadRequest)
		return
	}
	select {
	case u.started <- in.Op:
	default:
	}
	time.Sleep(u.delay)
	u.mu.Lock()
	u.effects[in.Op]++
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"charge":"ch_%d","op":%q}`+"\n", u.seq.Add(1), in.Op)
}

// count returns how many times op took effect.
func (u *upstream) count(op string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.effects[op]
}

// bench is one gateway in front of one upstream.
type bench struct {
	url string // the gateway
	up  *upstream
}

// setup starts an upstream whose charges take delay and an `idem serve` in front of it.
func setup(t *testing.T, delay time.Duration) *bench {
	t.Helper()
	up := &upstream{delay: delay, effects: map[string]int{}, started: make(chan string, 16)}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	return &bench{url: startGateway(t, "--upstream", srv.URL, "--store", "memory://", "--scope-header", apiKey, "--scope-secret", "clientcompat-0123456789abcdef"), up: up}
}

// startGateway runs `idem serve` with args on a free loopback port and waits until it is ready.
func startGateway(t *testing.T, args ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(binary, append([]string{"serve", "--listen", addr}, args...)...)
	cmd.Env = append(os.Environ(), "IDEM_CONFIG=")
	var logs bytes.Buffer
	var mu sync.Mutex
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			logs.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	log := func() string { mu.Lock(); defer mu.Unlock(); return logs.String() }
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("gateway logs:\n%s", log())
		}
	})
	url := "http://" + addr
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		select {
		case err := <-done:
			t.Fatalf("gateway exited: %v\n%s", err, log())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("gateway not ready after 20s:\n%s", log())
	return ""
}

// dropFirstAnswer puts a fault proxy in front of target (a URL) that lets the first request
// through and drops its answer (the gateway acted; the client hears nothing), then forwards
// faithfully. It returns the proxy's URL and a count of the answers it dropped.
func dropFirstAnswer(t *testing.T, target string) (string, func() int64) {
	t.Helper()
	var proxy atomic.Pointer[faultproxy.Proxy] // set before any request goes through
	p, err := faultproxy.New(faultproxy.Options{
		Target: target[len("http://"):],
		Faults: faultproxy.Faults{DropResponse: 1},
		OnFault: func(faultproxy.Event) {
			_ = proxy.Load().SetFaults(faultproxy.Faults{})
		},
	})
	proxy.Store(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return "http://" + p.Addr(), func() int64 { return p.Stats().DroppedResponses }
}

// cutFirstAnswer puts a proxy in front of target that forwards the first connection's answer
// only up to its first body bytes and then resets the connection: the client has the status
// and headers of the gateway's answer but not the whole body. Later connections are forwarded
// faithfully.
func cutFirstAnswer(t *testing.T, target string) (string, func() int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns, cuts atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		open = append(open, c)
		mu.Unlock()
	}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			first := conns.Add(1) == 1
			track(c)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				s, err := net.Dial("tcp", target[len("http://"):])
				if err != nil {
					return
				}
				track(s)
				defer s.Close()
				go func() { _, _ = io.Copy(s, c) }()
				if !first {
					_, _ = io.Copy(c, s)
					return
				}
				// Read the answer's head and a few body bytes, forward them, then reset.
				br := bufio.NewReader(s)
				var head bytes.Buffer
				for {
					line, err := br.ReadString('\n')
					head.WriteString(line)
					if err != nil || line == "\r\n" {
						break
					}
				}
				part := make([]byte, 5)
				n, _ := io.ReadFull(br, part)
				head.Write(part[:n])
				_, _ = c.Write(head.Bytes())
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
				cuts.Add(1)
			}()
		}
	}()
	return "http://" + ln.Addr().String(), cuts.Load
}

// result is what a client under test got for one intent.
type result struct {
	Status   int     `json:"status"`
	Body     string  `json:"body"`
	Replayed bool    `json:"replayed"`
	Seconds  float64 `json:"seconds"` // from the first attempt to the final answer
	Attempts int     `json:"attempts"`
	Err      string  `json:"error"`

	retryAfter time.Duration // plainPost: the answer's Retry-After
	end        time.Time     // plainPost: when the answer was read
}

func (r result) elapsed() time.Duration { return time.Duration(r.Seconds * float64(time.Second)) }

// plainPost sends one POST with key and no retries, as the original of an intent.
func plainPost(url, key, body string) (result, error) {
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/charges", bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set(apiKey, "tenant-1")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return result{Status: resp.StatusCode, Body: string(b), Replayed: resp.Header.Get("Idempotent-Replayed") == "true",
		Seconds: time.Since(start).Seconds(), Attempts: 1, retryAfter: time.Duration(ra) * time.Second, end: time.Now()}, err
}
