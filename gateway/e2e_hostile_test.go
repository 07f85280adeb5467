package gateway_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// keyCounter is an upstream that counts the POSTs it gets per Idempotency-Key; on a path
// ending in /hints it sends 103 Early Hints before its answer.
type keyCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (k *keyCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	if r.Method == http.MethodPost {
		k.mu.Lock()
		k.counts[r.Header.Get("Idempotency-Key")]++
		k.mu.Unlock()
	}
	if strings.HasSuffix(r.URL.Path, "/hints") {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":"x"}`)
}

func (k *keyCounter) count(key string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.counts[key]
}

// exchange writes request on a new connection and returns the status of the final answer
// (0 if the gateway closed the connection without one) and its body.
func exchange(t *testing.T, addr, request string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	go func() { _, _ = io.WriteString(conn, request) }() // a large request may be refused mid-write
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0, ""
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp.StatusCode, string(b)
		}
	}
}

// TestBinaryHostileInput sends adversarial HTTP/1.x to idem serve: conflicting framing,
// trailers that differ between retries, Expect: 100-continue, an upstream's 1xx answers,
// HTTP/1.0, an h2c preface to a gateway without --h2c, oversized and malformed headers, bodies
// just under and over --max-body, odd methods and paths. Each gets a clear answer (a 4xx for
// bad input), no key is executed twice, the gateway never panics, and its memory stays
// bounded.
func TestBinaryHostileInput(t *testing.T) {
	t.Parallel()
	up := &keyCounter{counts: map[string]int{}}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	g := startGateway(t, "--upstream", srv.URL, "--store", "memory://", "--max-body", "1KiB")
	addr := strings.TrimPrefix(g.url, "http://")
	post := func(key, extra, body string) string {
		return "POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: " + key + "\r\n" + extra +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	chunked := func(key, trailer string) string {
		return "POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: " + key + "\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sig\r\n\r\n" +
			"2\r\n{}\r\n0\r\nX-Sig: " + trailer + "\r\n\r\n"
	}
	cases := []struct {
		name, request string
		want          func(status int) bool
		key           string // the key whose effect must not happen twice (or at all, for a 4xx)
	}{
		// RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, which net/http drops; the
		// upstream gets the request framed anew, once.
		{"content-length and transfer-encoding",
			"POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: cl-te\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
			is(201), "cl-te"},
		{"two transfer-encodings",
			"POST /v1/charges HTTP/1.1\r\nHost: 127.0.0.1\r\nIdempotency-Key: te-te\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
			func(s int) bool { return is4xx(s) || s == 501 }, "te-te"},
		{"two different content-lengths", post("cl-cl", "Content-Length: 3\r\n", "{}"), is4xx, "cl-cl"},
		{"chunked with a trailer", chunked("trailer", "a"), is(201), "trailer"},
		{"the retry's trailer differs", chunked("trailer", "b"), is(201), "trailer"},
		{"http/1.0", "POST /v1/charges HTTP/1.0\r\nHost: 127.0.0.1\r\nIdempotency-Key: h10\r\nContent-Length: 2\r\n\r\n{}", is(201), "h10"},
		{"http/1.0 retry", "POST /v1/charges HTTP/1.0\r\nHost: 127.0.0.1\r\nIdempotency-Key: h10\r\nContent-Length: 2\r\n\r\n{}", is(201), "h10"},
		{"upstream 103 early hints", strings.Replace(post("hints", "", "{}"), "/v1/charges", "/v1/hints", 1), is(201), "hints"},
		{"upstream 103, retry", strings.Replace(post("hints", "", "{}"), "/v1/charges", "/v1/hints", 1), is(201), "hints"},
		{"expect 100-continue", post("expect", "Expect: 100-continue\r\n", "{}"), is(201), "expect"},
		{"expect 100-continue, too large", post("expect-big", "Expect: 100-continue\r\n", strings.Repeat("x", 2048)), is(413), "expect-big"},
		{"body at max-body", post("at-max", "", strings.Repeat("x", 1024)), is(201), "at-max"},
		{"body one over max-body", post("over-max", "", strings.Repeat("x", 1025)), is(413), "over-max"},
		{"an oversized header", post("big-header", "X-Big: "+strings.Repeat("b", 2<<20)+"\r\n", "{}"), func(s int) bool { return s == 431 || s == 0 }, "big-header"},
		{"a header without a colon", post("no-colon", "Broken header line\r\n", "{}"), is4xx, "no-colon"},
		{"a header name with a space", post("space", "X Bad: 1\r\n", "{}"), is4xx, "space"},
		{"a control character in a header", post("ctl", "X-A: a\x01b\r\n", "{}"), is4xx, "ctl"},
		{"a key of 256 characters", post(strings.Repeat("k", 256), "", "{}"), is(400), strings.Repeat("k", 256)},
		{"a non-ASCII key", post("clé", "", "{}"), is(400), "clé"},
		{"a lower-case method", strings.Replace(post("lower", "", "{}"), "POST", "post", 1), is(400), "lower"},
		{"an unknown method", strings.Replace(post("frob", "", "{}"), "POST", "FROB", 1), is(201), ""},
		{"a method with a slash", strings.Replace(post("slash-m", "", "{}"), "POST", "PO/ST", 1), is4xx, "slash-m"},
		{"an encoded slash", strings.Replace(post("enc", "", "{}"), "/v1/charges", "/v1/charges%2Fx", 1), is(400), "enc"},
		{"an encoded NUL", strings.Replace(post("nul", "", "{}"), "/v1/charges", "/v1/charges%00", 1), is(400), "nul"},
		{"a path without a slash", strings.Replace(post("noslash", "", "{}"), "/v1/charges", "v1/charges", 1), is4xx, "noslash"},
		{"an absolute-form target", strings.Replace(post("absolute", "", "{}"), "/v1/charges", "http://elsewhere.test/v1/charges", 1), is(201), "absolute"},
		{"a 16 KiB path", strings.Replace(post("long-path", "", "{}"), "/v1/charges", "/v1/"+strings.Repeat("a", 16<<10), 1), is(201), "long-path"},
		{"an h2c preface without --h2c", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", func(s int) bool { return s == 0 || s == 505 }, ""},
		{"garbage", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", func(s int) bool { return s == 0 || s >= 400 }, ""},
	}
	for _, tc := range cases {
		status, body := exchange(t, addr, tc.request)
		if !tc.want(status) {
			t.Errorf("%s: answered %d %q", tc.name, status, body)
		}
		if tc.key == "" {
			continue
		}
		if n := up.count(tc.key); n > 1 || (is4xx(status) && n > 0) {
			t.Errorf("%s: the upstream ran key %q %d times (answer %d)", tc.name, tc.key, n, status)
		}
	}
	// A retry whose trailer differs, or that came over HTTP/1.0, is the same request: replayed.
	for _, key := range []string{"trailer", "h10", "hints"} {
		if n := up.count(key); n != 1 {
			t.Errorf("key %q ran %d times, want 1", key, n)
		}
	}
	if hwm := vmKiB(t, g.cmd.Process.Pid, "VmHWM"); hwm > 256<<10 {
		t.Errorf("the gateway's peak memory reached %d KiB", hwm)
	}
	time.Sleep(200 * time.Millisecond) // the log's flush interval
	if logs := g.log(); strings.Contains(strings.ToLower(logs), "panic") {
		t.Fatalf("the gateway's log mentions a panic:\n%s", logs)
	}
}

func is(want int) func(int) bool { return func(s int) bool { return s == want } }

func is4xx(s int) bool { return s >= 400 && s < 500 }
