package storeurl

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestReadmeStoreURLs checks the README's "Store URLs" table against this package: every
// registered scheme and every query parameter a scheme reads is named there, so the table a
// user reads cannot fall behind what --store accepts.
func TestReadmeStoreURLs(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "**Store URLs.**")
	if start < 0 {
		t.Fatal(`README has no "Store URLs" section`)
	}
	section := text[start:]
	if end := strings.Index(section, "\n\n"+"The "); end > 0 {
		section = section[:end]
	}
	for _, s := range Schemes() {
		if !strings.Contains(section, "`"+s+"://") {
			t.Errorf("README's Store URLs table does not name the %s:// scheme", s)
		}
	}
	params := readParams(t)
	if len(params) < 10 {
		t.Fatalf("found %d parameters in the source; the scan is broken", len(params))
	}
	for _, p := range params {
		if !strings.Contains(section, "`"+p+"`") {
			t.Errorf("README's Store URLs table does not name the %q parameter", p)
		}
	}
}

// TestDocsNameOnlyRegisteredSchemes checks the other way round: every scheme a URL in the
// README or docs/ has, but http and https, is one storeurl opens, and the package
// documentation names every scheme it opens.
func TestDocsNameOnlyRegisteredSchemes(t *testing.T) {
	registered := map[string]bool{"http": true, "https": true}
	for _, s := range Schemes() {
		registered[s] = true
	}
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	urlScheme := regexp.MustCompile(`([a-z][a-z0-9+.-]*)://`)
	found := 0
	for _, name := range files {
		text, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range urlScheme.FindAllSubmatch(text, -1) {
			found++
			if s := string(m[1]); !registered[s] {
				t.Errorf("%s names the scheme %s://, which no store registers", filepath.Base(name), s)
			}
		}
	}
	if found < 10 {
		t.Fatalf("found %d URLs in the README and docs/; the scan is broken", found)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "storeurl.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	for _, s := range Schemes() {
		if !strings.Contains(doc, s+"://") {
			t.Errorf("the package documentation does not name the %s:// scheme", s)
		}
	}
}

// readParams returns the query parameter names this package's openers read: the string
// arguments of calls to get, take and boolParam.
func readParams(t *testing.T) []string {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var fn string
			switch c := call.Fun.(type) {
			case *ast.Ident:
				fn = c.Name
			case *ast.SelectorExpr:
				fn = c.Sel.Name
			}
			if fn != "get" && fn != "take" && fn != "boolParam" {
				return true
			}
			for _, a := range call.Args {
				if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					v, err := strconv.Unquote(lit.Value)
					if err == nil && !seen[v] {
						seen[v] = true
						out = append(out, v)
					}
				}
			}
			return true
		})
	}
	return out
}
