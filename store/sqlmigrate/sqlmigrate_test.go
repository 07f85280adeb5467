package sqlmigrate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/store/sqlmigrate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLoad(t *testing.T) {
	t.Parallel()
	good := fstest.MapFS{
		"m/0001_a.sql": {Data: []byte("CREATE a;")},
		"m/0002_b.sql": {Data: []byte("CREATE b;")},
		"m/README":     {Data: []byte("ignored")},
	}
	ms, err := sqlmigrate.Load(good, "m")
	if err != nil || len(ms) != 2 || ms[0].Version != 1 || ms[1].Name != "0002_b" || ms[1].SQL != "CREATE b;" {
		t.Fatalf("Load = %+v, %v", ms, err)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"gap":       {"m/0001_a.sql": {}, "m/0003_c.sql": {}},
		"no number": {"m/a.sql": {}},
		"short":     {"m/1_a.sql": {}},
		"empty":     {},
	} {
		if _, err := sqlmigrate.Load(fsys, "m"); err == nil {
			t.Errorf("%s: Load succeeded", name)
		}
	}
}

func TestStatementsAndExpand(t *testing.T) {
	t.Parallel()
	sql := sqlmigrate.Expand("-- comment\nCREATE TABLE {{table}} (\n  a int -- inline\n);\n\nCREATE INDEX {{index}} ON {{table}} (a);\n", map[string]string{"table": "`t`", "index": "`t_a`"})
	got := sqlmigrate.Statements(sql)
	want := []string{"CREATE TABLE `t` (\n  a int -- inline\n)", "CREATE INDEX `t_a` ON `t` (a)"}
	if len(got) != len(want) {
		t.Fatalf("Statements = %q", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("statement %d = %q, want %q", i, got[i], want[i])
		}
	}
}

// memTarget is a Target in memory, with a real lock, that counts what it applies.
type memTarget struct {
	lock    *sync.Mutex
	version *int
	applied *[]int
	failAt  int
}

func (m memTarget) Lock(context.Context) (func(context.Context) error, error) {
	m.lock.Lock()
	return func(context.Context) error { m.lock.Unlock(); return nil }, nil
}
func (m memTarget) Version(context.Context) (int, error) { return *m.version, nil }
func (m memTarget) Apply(_ context.Context, mg sqlmigrate.Migration) error {
	if mg.Version == m.failAt {
		return errors.New("boom")
	}
	time.Sleep(time.Millisecond) // widen the window for a racing migrator
	*m.applied = append(*m.applied, mg.Version)
	*m.version = mg.Version
	return nil
}

func TestRun(t *testing.T) {
	t.Parallel()
	ms := []sqlmigrate.Migration{{Version: 1, Name: "0001_a"}, {Version: 2, Name: "0002_b"}, {Version: 3, Name: "0003_c"}}
	var lock sync.Mutex
	version := 0
	var applied []int
	target := memTarget{lock: &lock, version: &version, applied: &applied}
	var wg sync.WaitGroup
	var mu sync.Mutex
	said := map[string]int{}
	for range 8 {
		wg.Go(func() {
			r, err := sqlmigrate.Run(context.Background(), target, ms)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			said[r.String()]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if said["created (version 3)"] != 1 || said["up to date (version 3)"] != 7 {
		t.Fatalf("8 concurrent runs said %v; want one created (version 3) and 7 up to date", said)
	}
	if len(applied) != 3 || applied[0] != 1 || applied[2] != 3 {
		t.Fatalf("applied %v, want each step once, in order", applied)
	}
	if r, err := sqlmigrate.Run(context.Background(), target, ms); r != (sqlmigrate.Result{From: 3, To: 3}) || err != nil {
		t.Fatalf("second Run = %+v, %v; want a no-op at version 3", r, err)
	}
	if _, err := sqlmigrate.Run(context.Background(), target, ms[:2]); !errors.Is(err, sqlmigrate.ErrNewerSchema) {
		t.Fatalf("Run with fewer migrations than applied = %v, want ErrNewerSchema", err)
	}
	version, applied = 1, nil
	if r, err := sqlmigrate.Run(context.Background(), target, ms); r != (sqlmigrate.Result{From: 1, To: 3}) || err != nil || r.String() != "migrated from 1 to 3" {
		t.Fatalf("Run from version 1 = %+v (%s), %v; want from 1 to 3", r, r, err)
	}
	version, applied = 0, nil
	failing := memTarget{lock: &lock, version: &version, applied: &applied, failAt: 2}
	r, err := sqlmigrate.Run(context.Background(), failing, ms)
	if n := r.Applied(); n != 1 || err == nil || !strings.Contains(err.Error(), "0002_b") {
		t.Fatalf("Run with a failing step = %d, %v; want 1 applied and an error naming the step", n, err)
	}
	if !lock.TryLock() {
		t.Fatal("the lock was not released after a failed run")
	}
	lock.Unlock()
}
