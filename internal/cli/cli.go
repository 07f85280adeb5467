// Package cli implements the idem command: one file per subcommand.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what a subcommand may touch: its output streams, so tests can run it in-process.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, env *env, args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

// errUsage marks an error caused by bad arguments: it exits 2.
var errUsage = errors.New("usage")

func usageError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// Main runs the idem command with args (without the program name) and returns the exit code:
// 0 on success, 1 on failure, 2 on bad usage.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return mainEnv(ctx, args, &env{stdout: stdout, stderr: stderr, getenv: os.Getenv})
}

// mainEnv is Main with its environment given.
func mainEnv(ctx context.Context, args []string, e *env) int {
	stdout, stderr := e.stdout, e.stderr
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		args = append([]string{"version"}, args[1:]...)
	}
	cmd, ok := commands[args[0]]
	if to := renamed[args[0]]; !ok && to != "" {
		fmt.Fprintf(stderr, "idem: %q is now %q: idem %s\n", args[0], to, to)
		return 2
	}
	if !ok {
		fmt.Fprintf(stderr, "idem: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := cmd.run(ctx, e, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "idem %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "idem %s: %v\n", args[0], err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "idem makes retried and duplicated requests safe: each has the effect of doing it once.")
	fmt.Fprintln(w, "\nUsage: idem <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun `idem <command> -h` for a command's flags; they may come before or after its arguments.")
}

// newFlags returns a FlagSet for a subcommand whose errors are returned, not printed twice.
func newFlags(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: idem %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, turning flag errors into usage errors. A flag's former name is refused
// with its new name.
func parse(fs *flag.FlagSet, args []string) error {
	if err := renamedFlag(args); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError("%v", err)
	}
	return nil
}

// signalContext returns a context cancelled on the first SIGINT or SIGTERM, and a channel that
// receives the second, so a daemon drains on the first and exits at once on the second.
func signalContext(ctx context.Context) (context.Context, <-chan os.Signal, func()) {
	ctx, cancel := context.WithCancel(ctx)
	sigs := make(chan os.Signal, 2)
	second := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		n := 0
		for s := range sigs {
			n++
			if n == 1 {
				cancel()
				continue
			}
			select {
			case second <- s:
			default:
			}
		}
	}()
	return ctx, second, func() {
		signal.Stop(sigs)
		cancel()
	}
}
