package clientcompat_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docSnippet matches a quoted snippet in docs/clients.md: a marker naming its source (a file,
// or a file and a region name), then a fenced block.
var docSnippet = regexp.MustCompile("(?s)<!-- snippet: (\\S+)(?: (\\S+))? -->\n```[a-z]*\n(.*?)```\n")

// TestDocQuotesSnippets keeps docs/clients.md and the snippets the tests run equal, so the
// page cannot drift from what was tested; and every snippet is quoted.
func TestDocQuotesSnippets(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "clients.md"))
	if err != nil {
		t.Fatal(err)
	}
	quoted := map[string]bool{}
	for _, m := range docSnippet.FindAllStringSubmatch(string(doc), -1) {
		file, name, body := m[1], m[2], m[3]
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			t.Errorf("the page quotes %s: %v", file, err)
			continue
		}
		want := string(src)
		if name != "" {
			want, err = region(want, name)
			if err != nil {
				t.Errorf("%s: %v", file, err)
				continue
			}
		}
		if body != want {
			t.Errorf("the page's block for %s %s differs from the source:\n--- page\n%s\n--- source\n%s", file, name, body, want)
		}
		quoted[file+" "+name] = true
	}
	for _, f := range []string{"testdata/requests_retry.py", "testdata/fetch_retry.mjs", "testdata/curl_retry.sh"} {
		if !quoted["internal/clientcompat/"+f+" "] {
			t.Errorf("%s is not quoted in docs/clients.md", f)
		}
	}
	src, _ := os.ReadFile("snippets_test.go")
	for _, m := range regexp.MustCompile(`(?m)^// snippet (\S+)$`).FindAllStringSubmatch(string(src), -1) {
		if !quoted["internal/clientcompat/snippets_test.go "+m[1]] {
			t.Errorf("the Go snippet %s is not quoted in docs/clients.md", m[1])
		}
	}
	if len(quoted) < 5 {
		t.Fatalf("only %d snippets found in docs/clients.md", len(quoted))
	}
}

// region returns the lines between "// snippet NAME" and the next "// end snippet", without
// the blank lines at either end.
func region(src, name string) (string, error) {
	start := "// snippet " + name + "\n"
	i := strings.Index(src, start)
	if i < 0 {
		return "", os.ErrNotExist
	}
	rest := src[i+len(start):]
	j := strings.Index(rest, "// end snippet")
	if j < 0 {
		return "", os.ErrNotExist
	}
	return strings.Trim(rest[:j], "\n") + "\n", nil
}
