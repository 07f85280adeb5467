package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is the idem version, set at build time with
// -ldflags "-X github.com/idemkit/idem/internal/cli.Version=v1.2.3"; otherwise taken from the
// module's build information.
var Version = ""

// Commit and CommitTime are the commit the binary was built from ("+dirty" appended for a tree
// with uncommitted changes) and that commit's time (RFC 3339, UTC), set at build time with
// -ldflags "-X github.com/idemkit/idem/internal/cli.Commit=..." (and CommitTime); the release
// builds set them from git. When empty, the build information's vcs.* settings are used, which
// go build records only with -buildvcs (many CI images turn it off).
var (
	Commit     = ""
	CommitTime = ""
)

func init() {
	register("version", "print the version and the commit it was built from (also idem --version)", func(ctx context.Context, e *env, args []string) error {
		if err := parseNoArgs(newFlags(e, "version", ""), args); err != nil {
			return err
		}
		bi, _ := debug.ReadBuildInfo()
		fmt.Fprintln(e.stdout, versionLine(bi))
		return nil
	})
}

// version is the idem version: Version, else the main module's version, else "devel".
func version() string {
	bi, _ := debug.ReadBuildInfo()
	return moduleVersion(bi)
}

func moduleVersion(bi *debug.BuildInfo) string {
	if Version != "" {
		return Version
	}
	if bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// versionLine is what `idem version` prints, from the binary's build information (nil when
// it has none): the module version, then the commit the binary was built from, "+dirty" if
// the tree had uncommitted changes, and the commit's time — Commit and CommitTime when the
// build set them, else as `go build` records them from version control (vcs.revision,
// vcs.modified, vcs.time); then the Go version and platform.
//
//	idem v1.4.0 (commit 1cee407e2d6a9c0b4b1f3c5e8d7a6b5c4d3e2f10, 2026-12-01T21:58:03Z, go1.26.0 linux/amd64)
func versionLine(bi *debug.BuildInfo) string {
	var details []string
	goVersion := runtime.Version()
	vcs := map[string]string{}
	if bi != nil {
		for _, s := range bi.Settings {
			vcs[s.Key] = s.Value
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
	}
	switch {
	case Commit != "": // stamped at build time: takes precedence over what go build recorded
		details = append(details, "commit "+Commit)
		if CommitTime != "" {
			details = append(details, CommitTime)
		}
	case vcs["vcs.revision"] != "":
		rev := vcs["vcs.revision"]
		if vcs["vcs.modified"] == "true" {
			rev += "+dirty"
		}
		details = append(details, "commit "+rev)
		if t := vcs["vcs.time"]; t != "" {
			details = append(details, t)
		}
	case bi != nil:
		details = append(details, "no commit recorded")
	default:
		details = append(details, "no build information")
	}
	details = append(details, goVersion+" "+runtime.GOOS+"/"+runtime.GOARCH)
	return fmt.Sprintf("idem %s (%s)", moduleVersion(bi), strings.Join(details, ", "))
}
