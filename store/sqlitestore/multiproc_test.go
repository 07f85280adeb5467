package sqlitestore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
)

// The multi-process test re-executes the test binary as child processes. TestMain sees
// childEnv and runs child instead of the tests.
const (
	childEnv  = "IDEM_SQLITESTORE_CHILD" // the child's id
	childFile = "IDEM_SQLITESTORE_FILE"  // the shared database file
	childKeys = "IDEM_SQLITESTORE_KEYS"  // how many keys
)

const (
	procs        = 3 // child processes
	procRoutines = 4 // goroutines per child
	procKeys     = 150
	procPasses   = 3 // each goroutine goes over every key this many times
)

// TestMultiProcess: several processes, each with several goroutines, run the same keys
// through engines on one SQLite file. Every key's effect runs exactly once overall (invariant
// 1), and the stored response is the one its executor produced.
func TestMultiProcess(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "shared.db")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	type proc struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
	}
	ps := make([]*proc, procs)
	for i := range ps {
		p := &proc{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMultiProcess$")}
		p.cmd.Env = append(os.Environ(),
			childEnv+"="+strconv.Itoa(i),
			childFile+"="+file,
			childKeys+"="+strconv.Itoa(procKeys),
			"GORACE=halt_on_error=1",
		)
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	// Children open the file (and race to migrate it) at once, then wait for the go file, so
	// that they hammer the keys at the same time.
	deadline := time.Now().Add(time.Minute)
	for i := range ps {
		for !exists(filepath.Join(dir, fmt.Sprintf("ready-%d", i))) {
			if time.Now().After(deadline) {
				t.Fatalf("child %d did not get ready", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	ranBy := map[string][]string{}
	for i, p := range ps {
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\nstderr:\n%s", i, err, p.stderr.String())
		}
		sc := bufio.NewScanner(&p.stdout)
		for sc.Scan() {
			if k, ok := strings.CutPrefix(sc.Text(), "ran "); ok {
				ranBy[k] = append(ranBy[k], strconv.Itoa(i))
			} else {
				t.Logf("child %d: %s", i, sc.Text())
			}
		}
	}

	st, err := sqlitestore.Open(ctx, file, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for k := range procKeys {
		key := procKey(k)
		if n := len(ranBy[key]); n != 1 {
			t.Errorf("%s: effect ran %d times (by children %v), want exactly once", key, n, ranBy[key])
			continue
		}
		rec, err := st.Get(ctx, key)
		if err != nil {
			t.Fatalf("Get %s: %v", key, err)
		}
		if rec.State != idem.StateCompleted || rec.Attempts != 1 || string(rec.Response.Body) != ranBy[key][0] {
			t.Errorf("%s: record %+v, want completed with body %q after one attempt", key, rec, ranBy[key][0])
		}
	}
	if len(ranBy) != procKeys {
		t.Errorf("effects ran for %d keys, want %d", len(ranBy), procKeys)
	}
}

func procKey(i int) string { return "order-" + strconv.Itoa(i) }

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// child is the body of one child process of TestMultiProcess. It prints "ran KEY" for every
// effect it executed and returns the exit code.
func child() int {
	id := os.Getenv(childEnv)
	file := os.Getenv(childFile)
	keys, _ := strconv.Atoi(os.Getenv(childKeys))
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "child %s: "+format+"\n", append([]any{id}, args...)...)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := sqlitestore.Open(ctx, file, sqlitestore.Options{BusyTimeout: 30 * time.Second})
	if err != nil {
		return fail("%v", err)
	}
	defer st.Close()
	eng, err := idem.New(st, idem.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fail("%v", err)
	}
	dir := filepath.Dir(file)
	if err := os.WriteFile(filepath.Join(dir, "ready-"+id), nil, 0o644); err != nil {
		return fail("%v", err)
	}
	for !exists(filepath.Join(dir, "go")) {
		if ctx.Err() != nil {
			return fail("no go signal")
		}
		time.Sleep(time.Millisecond)
	}

	var (
		mu                        sync.Mutex
		ran                       []string
		errs                      []error
		calls, replayed, inFlight int
	)
	fp := idem.Fingerprint([]byte("same request"))
	var wg sync.WaitGroup
	for range procRoutines {
		wg.Go(func() {
			for pass := range procPasses {
				// The first pass goes in the same order everywhere, so that all goroutines of
				// all processes race for the same fresh key; later passes in random orders.
				order := rand.Perm(keys)
				if pass == 0 {
					slices.Sort(order)
				}
				for _, k := range order {
					key := procKey(k)
					res, err := eng.Do(ctx, key, fp, func(context.Context) (idem.Response, error) {
						mu.Lock()
						ran = append(ran, key)
						mu.Unlock()
						return idem.Response{Body: []byte(id)}, nil
					})
					mu.Lock()
					calls++
					switch {
					case errors.Is(err, idem.ErrInFlight):
						inFlight++
					case err != nil:
						errs = append(errs, fmt.Errorf("%s: %w", key, err))
					case res.Replayed:
						replayed++
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return fail("%d errors, first: %v", len(errs), errs[0])
	}
	for _, k := range ran {
		fmt.Println("ran", k)
	}
	fmt.Printf("%d calls: %d executed, %d replayed, %d in flight\n", calls, len(ran), replayed, inFlight)
	return 0
}
