package cli

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocServeCommandsStart checks every `idem serve` command shown in a shell block of the
// README and docs/: its flags parse, and the resulting configuration passes the checks idem
// serve runs before it starts (a scope decision among them), so a reader who copies one gets
// a gateway, not a usage error.
func TestDocServeCommandsStart(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	for i, f := range files {
		if files[i], err = filepath.Abs(f); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	// Files a command may name, as a reader would have created them first.
	if err := os.WriteFile(filepath.Join(dir, "scope-secret"), []byte(strings.Repeat("s3cr3t-", 6)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	found := 0
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		files := configFiles(string(text))
		for _, c := range serveCommands(string(text)) {
			found++
			// A config file the command names is the one the document shows for it.
			for i, a := range c.args {
				if (a == "--config" || a == "-config") && i+1 < len(c.args) {
					body, ok := files[c.args[i+1]]
					if !ok {
						t.Errorf("%s:%d: %q names %s, which the document does not show in a yaml block", file, c.line, c.text, c.args[i+1])
						continue
					}
					if err := os.WriteFile(filepath.Join(dir, c.args[i+1]), []byte(body), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
			fs := newFlags(e, "serve", "")
			f := bindServe(e, fs)
			pos, err := parseInterspersed(fs, c.args)
			if err == nil && len(pos) > 0 {
				t.Errorf("%s:%d: unexpected arguments %v in %q", file, c.line, pos, c.text)
				continue
			}
			if err != nil {
				t.Errorf("%s:%d: %q: %v", file, c.line, c.text, err)
				continue
			}
			cfg, err := f.resolve(e, fs)
			if err == nil {
				err = cfg.WithDefaults().Validate()
			}
			if err != nil {
				t.Errorf("%s:%d: %q does not start: %v", file, c.line, c.text, err)
			}
		}
	}
	if found < 2 {
		t.Fatalf("found %d idem serve commands in the docs; the scan is broken", found)
	}
}

// configFiles returns the yaml blocks of a Markdown text that one of the two lines before
// them names as a file (`idem.yaml`), by that name.
func configFiles(md string) map[string]string {
	out := map[string]string{}
	lines := strings.Split(md, "\n")
	name := regexp.MustCompile("`([^`/ ]+[.]ya?ml)`")
	for i, l := range lines {
		if strings.TrimSpace(l) != "```yaml" {
			continue
		}
		var file string
		for j := i - 1; j >= 0 && j >= i-2 && file == ""; j-- {
			if m := name.FindStringSubmatch(lines[j]); m != nil {
				file = m[1]
			}
		}
		var body []string
		for j := i + 1; j < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[j]), "```"); j++ {
			body = append(body, lines[j])
		}
		if file != "" {
			if _, seen := out[file]; !seen {
				out[file] = strings.Join(body, "\n") + "\n"
			}
		}
	}
	return out
}

type docCommand struct {
	line int
	text string
	args []string // the arguments after "idem serve"
}

// serveCommands finds the `idem serve` commands in the sh/bash/shell fenced blocks of a
// Markdown text, joining backslash-continued lines.
func serveCommands(md string) []docCommand {
	var out []docCommand
	lines := strings.Split(md, "\n")
	inShell := false
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "```") {
			lang := strings.TrimPrefix(l, "```")
			inShell = !inShell && (lang == "sh" || lang == "bash" || lang == "shell" || lang == "console")
			continue
		}
		if !inShell {
			continue
		}
		start := i
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
		}
		words := shellWords(l)
		for j := 0; j+1 < len(words); j++ {
			if (words[j] == "idem" || strings.HasSuffix(words[j], "/idem")) && words[j+1] == "serve" {
				out = append(out, docCommand{line: start + 1, text: l, args: words[j+2:]})
				break
			}
		}
	}
	return out
}

// shellWords splits a shell line into words: quotes removed, the line cut at a comment or a
// control operator, and $VARIABLES left as they are (the commands here use them only for
// values whose form a reader chooses).
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
		case (r == '#' && !inWord) || r == '&' || r == '|' || r == ';':
			if inWord {
				words = append(words, w.String())
			}
			return words
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// TestServeCommandsScan checks the scanner on the forms the docs use.
func TestServeCommandsScan(t *testing.T) {
	md := "text idem serve --nope\n```sh\n./idem serve --a 1 \\\n    --b 'x y' # note\nIDEM_X=1 idem serve --c & echo\n```\n```go\nidem serve --d\n```\n"
	got := serveCommands(md)
	if len(got) != 2 {
		t.Fatalf("got %d commands, want 2: %+v", len(got), got)
	}
	if strings.Join(got[0].args, ",") != "--a,1,--b,x y" || got[0].line != 3 {
		t.Errorf("first: %+v", got[0])
	}
	if strings.Join(got[1].args, ",") != "--c" {
		t.Errorf("second: %+v", got[1])
	}
}
