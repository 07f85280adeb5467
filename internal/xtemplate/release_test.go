// Package xtemplate_test checks that the release build of idem links no template package
// that looks methods up by name.
package xtemplate_test

import (
	"os/exec"
	"strings"
	"testing"

	template "github.com/idemkit/idem/internal/xtemplate/text"
)

// TestReleaseLinksNoStdTemplates: with the release build's tags, cmd/idem depends on neither
// text/template nor html/template (whose method lookup keeps every exported method of every
// type in the binary: 41.5 MB instead of 30.1 MB), only on this directory's copies.
func TestReleaseLinksNoStdTemplates(t *testing.T) {
	tags, err := exec.Command("bash", "../../scripts/dist-tags.sh").Output()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "-tags", strings.TrimSpace(string(tags)), "./cmd/idem")
	cmd.Dir = "../.."
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	copies := 0
	for _, d := range deps {
		switch d {
		case "text/template", "html/template":
			t.Errorf("the release build links %s (through what imports it: go list -deps -f '{{.ImportPath}} {{.Imports}}')", d)
		case "github.com/idemkit/idem/internal/xtemplate/text", "github.com/idemkit/idem/internal/xtemplate/html":
			copies++
		}
	}
	if copies != 2 {
		t.Errorf("the release build links %d of the two template copies: the test no longer looks at the build that uses them", copies)
	}
}

// TestNoMethodCalls: the copy reads fields and map keys, calls functions, and refuses a
// method, naming it.
func TestNoMethodCalls(t *testing.T) {
	type data struct{ Name string }
	var b strings.Builder
	tpl := template.Must(template.New("t").Funcs(template.FuncMap{"up": strings.ToUpper}).Parse(`{{.Name}} {{up .Name}} {{index .M "k"}}`))
	if err := tpl.Execute(&b, map[string]any{"Name": "a", "M": map[string]string{"k": "v"}}); err != nil || b.String() != "a A v" {
		t.Fatalf("fields, functions, map keys: %q %v", b.String(), err)
	}
	b.Reset()
	if err := template.Must(template.New("t").Parse(`{{.Name}}`)).Execute(&b, data{"x"}); err != nil || b.String() != "x" {
		t.Fatalf("struct field: %q %v", b.String(), err)
	}
	err := template.Must(template.New("t").Parse(`{{.String}}`)).Execute(&b, strings.NewReplacer())
	if err == nil || !strings.Contains(err.Error(), "String") {
		t.Fatalf("a method call: %v, want an error naming String", err)
	}
}
