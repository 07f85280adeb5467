package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// testRef is a test the documentation names with its file: `store/pgstore/dotx_test.go:
// TestDoTxConcurrentDuplicates`, the path from the repository root.
var testRef = regexp.MustCompile("`([A-Za-z0-9_./-]+_test\\.go):\\s+((?:Test|Fuzz|Benchmark|Example)\\w*)`")

// TestDocsNameTestsWhereTheyAre checks every test the README and docs/ cite by file and name
// (docs/guarantees.md cites one for each promise): the file exists and declares the test, so
// a test moved or renamed cannot leave a promise pointing at nothing.
func TestDocsNameTestsWhereTheyAre(t *testing.T) {
	root := repoRoot(t)
	found := 0
	for _, doc := range docs(t, root) {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testRef.FindAllStringSubmatch(string(text), -1) {
			found++
			file, name := m[1], m[2]
			src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
			if err != nil {
				t.Errorf("%s cites %s: %s, but there is no %s", doc, file, name, file)
				continue
			}
			decl := regexp.MustCompile(`(?m)^func (\([^)]*\) )?` + name + `\(`)
			if !decl.Match(src) {
				t.Errorf("%s cites %s: %s, but %s declares no %s", doc, file, name, file, name)
			}
		}
	}
	if found < 100 {
		t.Fatalf("found %d tests cited with their file; the scan is broken", found)
	}
}
