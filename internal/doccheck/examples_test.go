package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// exampleRef is an example program the documentation names: examples/NAME.
var exampleRef = regexp.MustCompile(`examples/([a-z0-9-]+)`)

// TestExamplesAreLinked checks that every program under examples/ is named in the README or
// docs/ (so a newcomer finds it), and that every examples/NAME they name exists (so a renamed
// example leaves no link to nothing).
func TestExamplesAreLinked(t *testing.T) {
	root := repoRoot(t)
	named := map[string]string{} // example → the first doc naming it
	for _, doc := range docs(t, root) {
		text, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range exampleRef.FindAllStringSubmatch(string(text), -1) {
			if _, ok := named[m[1]]; !ok {
				named[m[1]] = doc
			}
		}
	}
	for name, doc := range named {
		if _, err := os.Stat(filepath.Join(root, "examples", name)); err != nil {
			t.Errorf("%s names examples/%s, which does not exist", doc, name)
		}
	}
	dirs, err := os.ReadDir(filepath.Join(root, "examples"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		found++
		if _, ok := named[d.Name()]; !ok {
			t.Errorf("examples/%s is named in neither README.md nor docs/", d.Name())
		}
	}
	if found < 10 {
		t.Fatalf("found %d examples; the scan is broken", found)
	}
}
