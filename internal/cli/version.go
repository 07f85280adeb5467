package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Version is the idem version, set at build time with -ldflags "-X ...cli.Version=v1.2.3";
// otherwise taken from the module's build information.
var Version = ""

func init() {
	register("version", "print the version", func(ctx context.Context, e *env, args []string) error {
		if err := parse(newFlags(e, "version", ""), args); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "idem %s (%s, %s/%s)\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return nil
	})
}

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
