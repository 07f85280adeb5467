package apicheck

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the API record in api/ from the source")

// repoRoot is the repository root, two folders up from this package.
const repoRoot = "../.."

// TestAPIRecord fails when the exported API of a public package differs from its record in
// api/, so every change to the public surface shows up as a diff of the record. Run with
// -update after an intended change, and add a CHANGELOG line for it.
func TestAPIRecord(t *testing.T) {
	pkgs, err := Collect(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found %d public packages; the walk is broken", len(pkgs))
	}
	dir := filepath.Join(repoRoot, "api")
	want := map[string]bool{}
	for _, p := range pkgs {
		file := filepath.Join(dir, recordName(p.Dir))
		want[file] = true
		text := strings.Join(p.Lines, "\n") + "\n"
		if *update {
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		old, err := os.ReadFile(file)
		if err != nil {
			t.Errorf("%s: no API record (%v); run: go test ./internal/apicheck -update", p.Dir, err)
			continue
		}
		if added, removed := diff(strings.Split(strings.TrimSuffix(string(old), "\n"), "\n"), p.Lines); len(added)+len(removed) > 0 {
			t.Errorf("%s: exported API differs from %s; if intended, run go test ./internal/apicheck -update and add a CHANGELOG line\n+ %s\n- %s",
				p.Dir, file, strings.Join(added, "\n+ "), strings.Join(removed, "\n- "))
		}
	}
	// A record whose package is gone.
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || want[path] {
			return err
		}
		if *update {
			return os.Remove(path)
		}
		t.Errorf("%s records a package that no longer exists; run go test ./internal/apicheck -update", path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// recordName maps a package folder to its record file: idem.txt for the root, the folder
// path otherwise (store/pgstore.txt).
func recordName(dir string) string {
	if dir == "." {
		return "idem.txt"
	}
	return filepath.FromSlash(dir) + ".txt"
}

// diff returns the lines of b missing from a (added) and of a missing from b (removed).
func diff(a, b []string) (added, removed []string) {
	in := func(s []string) map[string]bool {
		m := map[string]bool{}
		for _, l := range s {
			m[l] = true
		}
		return m
	}
	ia, ib := in(a), in(b)
	for _, l := range b {
		if !ia[l] {
			added = append(added, l)
		}
	}
	for _, l := range a {
		if !ib[l] {
			removed = append(removed, l)
		}
	}
	return added, removed
}

// TestCollectRecordsEveryKind checks the record on a package that has each kind of exported
// name, so a walk that silently drops fields, methods or generic types fails here.
func TestCollectRecordsEveryKind(t *testing.T) {
	pkgs, err := Collect(filepath.Join("testdata", "sample"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 {
		t.Fatalf("got %d packages, want 1", len(pkgs))
	}
	got := strings.Join(pkgs[0].Lines, "\n")
	for _, want := range []string{
		"pkg sample, const A Mode",
		"pkg sample, const B Mode",
		"pkg sample, const Limit",
		"pkg sample, var ErrBad",
		"pkg sample, func New(n int) (*Thing, error)",
		"pkg sample, func Map[In, Out any](in []In, f func(In) Out) []Out",
		"pkg sample, type Thing struct",
		"pkg sample, type Thing struct, Name string",
		"pkg sample, type Thing struct, embedded Base",
		"pkg sample, method (*Thing) Run(ctx context.Context) error",
		"pkg sample, type Doer interface",
		"pkg sample, type Doer interface, Do(key string) error",
		"pkg sample, type Mode uint8",
		"pkg sample, type Pair[K comparable, V any] struct",
		"pkg sample, type Pair struct, Key K",
	} {
		if !strings.Contains(got+"\n", want+"\n") {
			t.Errorf("record lacks %q; got:\n%s", want, got)
		}
	}
	for _, hidden := range []string{"secret", "hidden", "internalOnly", "unexportedMethod"} {
		if strings.Contains(got, hidden) {
			t.Errorf("record shows unexported %q:\n%s", hidden, got)
		}
	}
}
