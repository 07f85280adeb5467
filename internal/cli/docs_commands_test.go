package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// operatorCommands are the commands an operator runs once and reads the answer of; serve,
// console and demo keep running (serve's commands have TestDocServeCommandsStart).
var operatorCommands = map[string]bool{"list": true, "inspect": true, "release": true, "sweep": true, "migrate": true, "version": true}

// TestDocOperatorCommandsParse runs every `idem list|inspect|release|sweep|migrate|version`
// command the README and docs/ show, in shell blocks and inline code alike (the runbook's
// steps are inline), against an empty store: each must be understood (exit 0, or 1 for "no
// record"), never refused as bad usage (exit 2), so that a command an operator copies during an
// incident does what the document says. The store the command names is replaced by the
// empty one; placeholders (KEY, VALUE, $VARIABLES) stay as they are.
func TestDocOperatorCommandsParse(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	dir := t.TempDir()
	store := "sqlite://" + filepath.Join(dir, "idem.db")
	vars := map[string]string{"IDEM_STORE": store, "IDEM_SCOPE_SECRET": strings.Repeat("s3cr3t-", 6)}
	if code, _, errs := runEnv(t, vars, "migrate"); code != 0 {
		t.Fatalf("migrate: %d %s", code, errs)
	}
	found := 0
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range operatorDocCommands(string(text)) {
			found++
			args := withoutStore(c.args)
			code, _, errs := runEnv(t, vars, args...)
			if code == 2 {
				t.Errorf("%s:%d: %q is refused as bad usage: %s", filepath.Base(file), c.line, c.text, strings.TrimSpace(errs))
			}
		}
	}
	if found < 10 {
		t.Fatalf("found %d operator commands in the docs; the scan is broken", found)
	}
}

// withoutStore drops a --store URL from args: the test's store stands in for it.
func withoutStore(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--store" || a == "-store":
			i++
		case strings.HasPrefix(a, "--store=") || strings.HasPrefix(a, "-store="):
		default:
			out = append(out, a)
		}
	}
	return out
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

// operatorDocCommands finds the operator commands of a Markdown text: in sh/bash/shell/console
// fenced blocks (backslash-continued lines joined) and in inline code spans with at least two
// words after the subcommand. args starts with the subcommand.
func operatorDocCommands(md string) []docCommand {
	var out []docCommand
	// minArgs is how many words must follow the subcommand: prose names a command and a flag
	// ("`idem release --force` deletes…") in inline code, which is no command to run.
	add := func(line int, l string, minArgs int) {
		words := shellWords(l)
		for j := 0; j+1 < len(words); j++ {
			if (words[j] == "idem" || strings.HasSuffix(words[j], "/idem")) && operatorCommands[words[j+1]] {
				if len(words)-j-2 >= minArgs {
					out = append(out, docCommand{line: line, text: l, args: words[j+1:]})
				}
				return
			}
		}
	}
	lines := strings.Split(md, "\n")
	fenced, inShell := false, false
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "```") {
			lang := strings.TrimPrefix(l, "```")
			fenced = !fenced
			inShell = fenced && (lang == "sh" || lang == "bash" || lang == "shell" || lang == "console")
			continue
		}
		switch {
		case inShell:
			start := i
			for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
				i++
				l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
			}
			add(start+1, l, 0)
		case !fenced:
			for _, m := range inlineCode.FindAllStringSubmatch(l, -1) {
				add(i+1, m[1], 2)
			}
		}
	}
	return out
}

// TestOperatorDocCommandsScan checks the scanner on the forms the docs use.
func TestOperatorDocCommandsScan(t *testing.T) {
	md := "Run `idem list --state stuck` or `idem serve --x`; `idem release --force` deletes.\n```sh\nidem inspect KEY \\\n  --scope-value V # note\n```\n```go\nidem list --nope\n```\n"
	got := operatorDocCommands(md)
	if len(got) != 2 {
		t.Fatalf("got %d commands, want 2: %+v", len(got), got)
	}
	if strings.Join(got[0].args, ",") != "list,--state,stuck" || got[0].line != 1 {
		t.Errorf("first: %+v", got[0])
	}
	if strings.Join(got[1].args, ",") != "inspect,KEY,--scope-value,V" || got[1].line != 3 {
		t.Errorf("second: %+v", got[1])
	}
	if a := withoutStore([]string{"list", "--store", "redis://x", "--store=y", "--json"}); strings.Join(a, ",") != "list,--json" {
		t.Errorf("withoutStore: %v", a)
	}
}
