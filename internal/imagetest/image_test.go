// Package imagetest runs the idem container image as an operator would: `make image-test`
// builds the image and runs these tests with IDEM_IMAGE set; without it they skip.
package imagetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/jackc/pgx/v5"
)

// podman runs the podman command line of IDEM_PODMAN (the global flags that work on this
// host; scripts/image-podman.sh) with args, and returns its trimmed standard output.
func podman(t *testing.T, args ...string) string {
	t.Helper()
	out, err := podmanErr(args...)
	if err != nil {
		t.Fatalf("podman %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func podmanErr(args ...string) (string, error) {
	base := strings.Fields(os.Getenv("IDEM_PODMAN"))
	if len(base) == 0 {
		base = []string{"podman"}
	}
	cmd := exec.Command(base[0], append(base[1:], args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// image is the image under test, from IDEM_IMAGE; the test skips without it.
func image(t *testing.T) string {
	img := os.Getenv("IDEM_IMAGE")
	if img == "" {
		t.Skip("IDEM_IMAGE names the image to test: make image-test builds it and sets it")
	}
	return img
}

// freePort returns a port on 127.0.0.1 that nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// container is a running idem image: where its gateway and metrics listen.
type container struct {
	id      string
	gateway string // http://127.0.0.1:P
	metrics string // http://127.0.0.1:M
}

// run starts the image in the background with the host's network and the ulimits of
// IDEM_PODMAN_RUN, passing args to `idem serve`, and waits until /readyz answers 200.
func run(t *testing.T, img string, podmanArgs []string, serveArgs ...string) *container {
	t.Helper()
	gw, mt := freePort(t), freePort(t)
	args := []string{"run", "-d"}
	args = append(args, strings.Fields(os.Getenv("IDEM_PODMAN_RUN"))...)
	args = append(args, podmanArgs...)
	args = append(args, img,
		"--listen", fmt.Sprintf("127.0.0.1:%d", gw), "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", mt))
	args = append(args, serveArgs...)
	c := &container{id: podman(t, args...), gateway: fmt.Sprintf("http://127.0.0.1:%d", gw), metrics: fmt.Sprintf("http://127.0.0.1:%d", mt)}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := podmanErr("logs", c.id)
			t.Logf("container logs:\n%s", logs)
		}
		_, _ = podmanErr("rm", "-f", "-t", "0", c.id)
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(c.metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
		}
		if time.Now().After(deadline) {
			state, _ := podmanErr("inspect", "--format", "{{.State.Status}} exit {{.State.ExitCode}}", c.id)
			t.Fatalf("/readyz not 200 within 60s (last: %v); container %s", err, state)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// post sends body to url with the key and returns the status, the Idempotent-Replayed header
// and the body.
func post(t *testing.T, url, key, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b)
}

// upstream is a small payments API: POST /v1/charges counts charges and answers 201;
// POST /v1/slow announces its arrival on arrived and answers 201 once release is closed.
type upstream struct {
	*httptest.Server
	charges atomic.Int64
	arrived chan struct{}
	release chan struct{}
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{arrived: make(chan struct{}, 1), release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/v1/charges":
			n := u.charges.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id":"ch_%d","request":%s}`, n, body)
		case "/v1/slow":
			u.arrived <- struct{}{}
			<-u.release
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"slow":"done"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// TestImageUser: the image declares a numeric non-root user, and its process runs as it.
func TestImageUser(t *testing.T) {
	img := image(t)
	user := podman(t, "image", "inspect", "--format", "{{.Config.User}}", img)
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Fatalf("image user %q: want a numeric non-root uid", user)
	}
	up := newUpstream(t)
	c := run(t, img, nil, "--upstream", up.URL, "--scope", "none", "--store", "memory://")
	pid := podman(t, "inspect", "--format", "{{.State.Pid}}", c.id)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") {
			for _, id := range f[1:] {
				if id == "0" {
					t.Errorf("container process %s: %s (root)", pid, line)
				}
			}
			if f[0] == "Uid:" && f[1] != uid {
				t.Errorf("container process runs as uid %s, the image declares %s", f[1], uid)
			}
		}
	}
}

// TestImageVersion: `idem version` in the image names the commit it was built from
// (IDEM_IMAGE_COMMIT, git rev-parse HEAD at build time).
func TestImageVersion(t *testing.T) {
	img := image(t)
	commit := os.Getenv("IDEM_IMAGE_COMMIT")
	if commit == "" {
		t.Fatal("IDEM_IMAGE_COMMIT: the commit the image was built from (make image-test sets it)")
	}
	args := append([]string{"run", "--rm"}, strings.Fields(os.Getenv("IDEM_PODMAN_RUN"))...)
	out := podman(t, append(args, "--entrypoint", "/usr/local/bin/idem", img, "version")...)
	if !strings.HasPrefix(out, "idem ") || !strings.Contains(out, "commit "+commit) || !strings.Contains(out, "linux/") {
		t.Fatalf("idem version in the image = %q, want the commit %s", out, commit)
	}
}

// TestImagePostgres runs the image against the local PostgreSQL and an upstream: the README's
// curl pair (201, then the replay with Idempotent-Replayed: true, then 422 for another body
// under the key), /readyz, and a SIGTERM that lets an in-flight request finish and exits 0.
func TestImagePostgres(t *testing.T) {
	img := image(t)
	pg := testenv.PostgresURL(t)
	sep := "?"
	if strings.Contains(pg, "?") {
		sep = "&"
	}
	// A table of this run's own, dropped when the test ends (after the container stopped:
	// cleanups run last registered first).
	table := fmt.Sprintf("idem_image_test_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pg)
		if err != nil {
			t.Logf("dropping %s: %v", table, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			t.Logf("dropping %s: %v", table, err)
		}
		if _, err := conn.Exec(ctx, "DELETE FROM idem_migrations WHERE tbl = $1", table); err != nil {
			t.Logf("dropping %s: %v", table, err)
		}
	})
	up := newUpstream(t)
	c := run(t, img, nil, "--upstream", up.URL, "--scope", "none", "--store", pg+sep+"table="+table,
		"--shutdown-delay", "1s")

	key := fmt.Sprintf("order-%d", time.Now().UnixNano())
	body := `{"amount":1000,"currency":"eur"}`
	code, replayed, first := post(t, c.gateway+"/v1/charges", key, body)
	if code != http.StatusCreated || replayed != "" {
		t.Fatalf("first: %d replayed=%q %s, want 201 not replayed", code, replayed, first)
	}
	code, replayed, again := post(t, c.gateway+"/v1/charges", key, body)
	if code != http.StatusCreated || replayed != "true" || again != first {
		t.Fatalf("retry: %d replayed=%q %s, want 201, Idempotent-Replayed: true and %s", code, replayed, again, first)
	}
	if code, _, b := post(t, c.gateway+"/v1/charges", key, `{"amount":9999,"currency":"eur"}`); code != http.StatusUnprocessableEntity {
		t.Fatalf("another body under the key: %d %s, want 422", code, b)
	}
	if n := up.charges.Load(); n != 1 {
		t.Fatalf("upstream charged %d times, want 1", n)
	}

	// SIGTERM with a request in flight: /readyz turns 503, the request still completes, and
	// the process exits 0.
	type result struct {
		code int
		body string
	}
	done := make(chan result, 1)
	go func() {
		code, _, b := post(t, c.gateway+"/v1/slow", key+"-slow", `{}`)
		done <- result{code, b}
	}()
	select {
	case <-up.arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow request did not reach the upstream")
	}
	podman(t, "kill", "--signal", "TERM", c.id)
	notReady := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(c.metrics + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				notReady = true
				break
			}
		}
	}
	if !notReady {
		t.Error("/readyz did not answer 503 after SIGTERM")
	}
	time.Sleep(1500 * time.Millisecond) // past the shutdown delay: the drain waits for the request
	close(up.release)
	select {
	case r := <-done:
		if r.code != http.StatusCreated {
			t.Errorf("in-flight request across SIGTERM: %d %s, want 201", r.code, r.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the in-flight request did not finish")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := strings.Fields(os.Getenv("IDEM_PODMAN"))
	if len(base) == 0 {
		base = []string{"podman"}
	}
	out, err := exec.CommandContext(ctx, base[0], append(base[1:], "wait", c.id)...).Output()
	if err != nil {
		t.Fatalf("podman wait: %v", err)
	}
	if code := strings.TrimSpace(string(out)); code != "0" {
		t.Fatalf("exit code after SIGTERM: %s, want 0", code)
	}
}

// TestImageSQLiteVolume: with no --store, the image keeps its records in SQLite on the /data
// volume, as the image's user, and a replay is served from it.
func TestImageSQLiteVolume(t *testing.T) {
	img := image(t)
	vol := fmt.Sprintf("idem-image-test-%d", time.Now().UnixNano())
	t.Cleanup(func() { _, _ = podmanErr("volume", "rm", "-f", vol) })
	up := newUpstream(t)
	c := run(t, img, []string{"-v", vol + ":/data"}, "--upstream", up.URL, "--scope", "none")
	code, _, first := post(t, c.gateway+"/v1/charges", "k1", `{"amount":1}`)
	if code != http.StatusCreated {
		t.Fatalf("first: %d %s", code, first)
	}
	code, replayed, again := post(t, c.gateway+"/v1/charges", "k1", `{"amount":1}`)
	if code != http.StatusCreated || replayed != "true" || again != first {
		t.Fatalf("retry: %d replayed=%q %s, want the replay of %s", code, replayed, again, first)
	}
	mount := podman(t, "volume", "inspect", "--format", "{{.Mountpoint}}", vol)
	fi, err := os.Stat(filepath.Join(mount, "idem.db"))
	if err != nil {
		t.Fatalf("the default store is not on the /data volume: %v", err)
	}
	if fi.Size() == 0 {
		t.Error("idem.db on the volume is empty")
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 {
		t.Error("idem.db on the volume is owned by root: the gateway does not run as the image's user")
	}
}
