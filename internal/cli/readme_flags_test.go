package cli

import (
	"flag"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeFlagTable checks the README's table of `idem serve` flags against the real flag
// set: every flag is in the table and every row names a real flag, so the two cannot drift.
func TestReadmeFlagTable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\|(.*)$")
	table := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		table[m[1]] = m[2]
	}
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	fs := newFlags(e, "serve", "")
	bindServe(e, fs)
	var real []string
	fs.VisitAll(func(f *flag.Flag) { real = append(real, f.Name) })
	for _, name := range real {
		if _, ok := table[name]; !ok {
			t.Errorf("flag --%s of idem serve is missing from the README's flag table", name)
		}
	}
	for name := range table {
		if !slices.Contains(real, name) {
			t.Errorf("the README's flag table lists --%s, which idem serve does not have", name)
		}
	}
	// The levels the flag accepts are all named in the table.
	if usage := fs.Lookup("log-level"); usage != nil {
		for _, level := range []string{"debug", "info", "warn", "error"} {
			if strings.Contains(usage.Usage, level) && !strings.Contains(table["log-level"], level) {
				t.Errorf("the README's --log-level row does not name the %q level", level)
			}
		}
	}
}
