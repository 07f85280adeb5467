package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionLine: the version line carries the module version, the commit with +dirty for a
// modified tree, and the commit's time, from the build information's vcs.* settings.
func TestVersionLine(t *testing.T) {
	t.Parallel()
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"release", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "1cee407e2d6a9c0b4b1f3c5e8d7a6b5c4d3e2f10"},
			{Key: "vcs.time", Value: "2026-12-01T21:58:03Z"}, {Key: "vcs.modified", Value: "false"}}},
			"idem v1.4.0 (commit 1cee407e2d6a9c0b4b1f3c5e8d7a6b5c4d3e2f10, 2026-12-01T21:58:03Z, go1.26.0 " + platform + ")"},
		{"dirty", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-12-01T21:58:03Z"}, {Key: "vcs.modified", Value: "true"}}},
			"idem devel (commit abc123+dirty, 2026-12-01T21:58:03Z, go1.26.0 " + platform + ")"},
		{"no vcs", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.4.1"}},
			"idem v1.4.1 (no commit recorded, go1.26.0 " + platform + ")"},
		{"no build info", nil, "idem devel (no build information, " + runtime.Version() + " " + platform + ")"},
	} {
		if got := versionLine(tc.bi); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

// TestVersionBinary builds idem with go build and checks that `idem version` and
// `idem --version` print the commit the tree is at, +dirty when it has changes, and its time.
func TestVersionBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
		cmd.Env = append(os.Environ(), "TZ=UTC")
		out, err := cmd.Output()
		if err != nil {
			t.Skipf("git %v: %v: not built from a git checkout, so no commit to compare", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	if fi, err := os.Stat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		t.Skip("not a git checkout whose .git is a directory (a linked worktree, say): go build records no commit there")
	}
	head := git("rev-parse", "HEAD")
	dirty := git("status", "--porcelain") != ""
	commitTime := git("log", "-1", "--date=format-local:%Y-%m-%dT%H:%M:%SZ", "--format=%cd")
	bin := filepath.Join(t.TempDir(), "idem")
	build := exec.Command("go", "build", "-o", bin, "./cmd/idem")
	build.Dir = root
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true") // a GOFLAGS of the machine may turn stamping off
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	want := "commit " + head
	if dirty {
		want += "+dirty"
	}
	for _, arg := range []string{"version", "--version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil {
			t.Fatalf("idem %s: %v", arg, err)
		}
		line := strings.TrimSpace(string(out))
		if !strings.HasPrefix(line, "idem ") || !strings.Contains(line, want+", ") || !strings.Contains(line, runtime.GOOS+"/"+runtime.GOARCH) {
			t.Errorf("idem %s = %q, want %q in it", arg, line, want)
		}
		if !strings.Contains(line, ", "+commitTime+", ") {
			t.Errorf("idem %s = %q: not the commit's time %s", arg, line, commitTime)
		}
	}
}

// TestVersionStamped builds idem as the release builds do (scripts/dist-ldflags.sh, with
// GOFLAGS=-buildvcs=false so go build records nothing from git itself) and checks that
// `idem version` prints the version, the commit the tree is at (+dirty when it has changes)
// and the commit's time, stamped by the linker. It works from a linked worktree too.
func TestVersionStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
		cmd.Env = append(os.Environ(), "TZ=UTC")
		out, err := cmd.Output()
		if err != nil {
			t.Skipf("git %v: %v: not a git checkout, so no commit to stamp", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	head := git("rev-parse", "HEAD")
	if git("status", "--porcelain", "--untracked-files=no") != "" {
		head += "+dirty"
	}
	commitTime := git("log", "-1", "--date=format-local:%Y-%m-%dT%H:%M:%SZ", "--format=%cd")
	flags := exec.Command("bash", "scripts/dist-ldflags.sh")
	flags.Dir = root
	flags.Env = append(os.Environ(), "VERSION=v9.8.7-test")
	ldflags, err := flags.Output()
	if err != nil {
		t.Fatalf("scripts/dist-ldflags.sh: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "idem")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", strings.TrimSpace(string(ldflags)), "-o", bin, "./cmd/idem")
	build.Dir = root
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("idem version: %v", err)
	}
	line := strings.TrimSpace(string(out))
	want := "idem v9.8.7-test (commit " + head + ", " + commitTime + ", "
	if !strings.HasPrefix(line, want) || !strings.HasSuffix(line, runtime.GOOS+"/"+runtime.GOARCH+")") {
		t.Errorf("idem version = %q, want it to start with %q", line, want)
	}
}

// TestVersionLineStamped: a commit stamped at build time (Commit, CommitTime) is what the line
// names, before whatever go build recorded from version control, and also without build
// information. Not parallel: it sets the package's stamped variables.
func TestVersionLineStamped(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	Version, Commit, CommitTime = "v1.5.0", "2f10aa+dirty", "2026-12-02T10:00:00Z"
	t.Cleanup(func() { Version, Commit, CommitTime = "", "", "" })
	vcs := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0000ff"}, {Key: "vcs.time", Value: "2020-01-01T00:00:00Z"}}}
	if got, want := versionLine(vcs), "idem v1.5.0 (commit 2f10aa+dirty, 2026-12-02T10:00:00Z, go1.26.0 "+platform+")"; got != want {
		t.Errorf("with vcs settings:\n got %s\nwant %s", got, want)
	}
	noVCS := &debug.BuildInfo{GoVersion: "go1.26.0"}
	if got, want := versionLine(noVCS), "idem v1.5.0 (commit 2f10aa+dirty, 2026-12-02T10:00:00Z, go1.26.0 "+platform+")"; got != want {
		t.Errorf("without vcs settings:\n got %s\nwant %s", got, want)
	}
	if got, want := versionLine(nil), "idem v1.5.0 (commit 2f10aa+dirty, 2026-12-02T10:00:00Z, "+runtime.Version()+" "+platform+")"; got != want {
		t.Errorf("without build information:\n got %s\nwant %s", got, want)
	}
}
