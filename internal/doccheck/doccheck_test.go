// Package doccheck keeps the documentation honest: every Go block of the README and of docs/
// compiles, and every YAML block loads with the gateway's own config parser.
//
// A Go block that starts with "package" is compiled as a file of its own; a block of
// declarations (functions, types) as a file without its package clause; any other Go block is
// a fragment, compiled as the body of a function. The packages a block names are imported for
// it. The names a fragment uses without declaring them (a handler, a request body) are
// declared in an HTML comment right above the block, which readers of the rendered page do not
// see:
//
//	<!-- go-context: var paymentsHandler http.Handler -->
//	```go
//	http.ListenAndServe(":8080", mw(paymentsHandler))
//	```
package doccheck

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idem/gateway"
)

// block is one fenced code block of a Markdown file.
type block struct {
	file    string // path relative to the repository root
	line    int    // line of the first line of code
	lang    string
	code    string
	context string // Go declarations from a go-context comment above the block
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

var contextComment = regexp.MustCompile(`^<!--\s*go-context:\s*(.*?)\s*-->$`)

// blocks returns the fenced code blocks of a Markdown file.
func blocks(t *testing.T, root, rel string) []block {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	var cur *block
	var code strings.Builder
	prev := "" // the last non-blank line outside a block
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &block{file: rel, line: n + 1, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
			if m := contextComment.FindStringSubmatch(prev); m != nil {
				cur.context = m[1]
			}
			code.Reset()
		case cur != nil && trimmed == "```":
			cur.code = code.String()
			out = append(out, *cur)
			cur, prev = nil, ""
		case cur != nil:
			code.WriteString(line)
			code.WriteByte('\n')
		case trimmed != "":
			prev = trimmed
		}
	}
	if cur != nil {
		t.Errorf("%s: block opened at line %d is never closed", rel, cur.line-1)
	}
	return out
}

// docs returns the Markdown files whose blocks are checked.
func docs(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

func allBlocks(t *testing.T, root string) []block {
	var all []block
	for _, f := range docs(t, root) {
		all = append(all, blocks(t, root, f)...)
	}
	return all
}

// TestYAMLBlocksLoad loads every YAML block with the gateway's config parser, which rejects
// unknown keys, and checks its route rules.
func TestYAMLBlocksLoad(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	n := 0
	for _, b := range allBlocks(t, root) {
		if b.lang != "yaml" && b.lang != "yml" {
			continue
		}
		n++
		c, err := gateway.Parse([]byte(b.code))
		if err != nil {
			t.Errorf("%s: YAML block does not load: %v", b, err)
			continue
		}
		if err := c.WithDefaults().Validate(); err != nil {
			t.Errorf("%s: YAML block loads but is not a valid configuration: %v", b, err)
		}
	}
	if n == 0 {
		t.Fatal("no YAML block found: the README shows a config file")
	}
}

// TestGoBlocksCompile compiles every Go block, each as a package of its own, in one go build.
func TestGoBlocksCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the documentation's Go blocks with go build; skipped with -short")
	}
	t.Parallel()
	root := repoRoot(t)
	pkgs := modulePackages(t, root)
	tmp := t.TempDir()
	overlay := map[string]string{}
	var targets []string
	for i, b := range allBlocks(t, root) {
		if b.lang != "go" {
			continue
		}
		src, err := goFile(b, pkgs)
		if err != nil {
			t.Errorf("%s: %v", b, err)
			continue
		}
		dir := filepath.Join(root, "internal", "doccheck", "generated", fmt.Sprintf("b%03d", i))
		file := filepath.Join(tmp, fmt.Sprintf("b%03d.go", i))
		if err := os.WriteFile(file, src, 0o644); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(dir, "snippet.go")] = file
		targets = append(targets, "./"+filepath.ToSlash(must(filepath.Rel(root, dir))))
	}
	if len(targets) == 0 {
		t.Fatal("no Go block found: the README shows Go code")
	}
	ov, _ := json.Marshal(map[string]any{"Replace": overlay})
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"build", "-overlay", ovFile}, targets...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the documentation's Go blocks do not compile (positions are in the Markdown files):\n%s", out)
	}
	t.Logf("%d Go blocks compiled", len(targets))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// goFile turns a block into a compilable file whose positions point into the Markdown file.
func goFile(b block, pkgs map[string]string) ([]byte, error) {
	if strings.HasPrefix(strings.TrimSpace(b.code), "package ") {
		return []byte(fmt.Sprintf("//line %s:%d\n%s", b.file, b.line, b.code)), nil
	}
	fset := token.NewFileSet()
	ctxFile, err := parser.ParseFile(fset, "", "package p\n"+contextDecls(b.context), parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("go-context comment does not parse: %v", err)
	}
	declared := map[string]bool{}
	for _, d := range ctxFile.Decls {
		for _, n := range declNames(d) {
			declared[n] = true
		}
	}
	// A block of declarations (functions, types) is a file without its package clause; any
	// other block is a function body.
	f, err := parser.ParseFile(fset, "", "package p\n"+b.code, parser.SkipObjectResolution)
	topLevel := err == nil
	var locals []string
	if topLevel {
		for _, d := range f.Decls {
			for _, n := range declNames(d) {
				declared[n] = true
			}
		}
	} else {
		f, err = parser.ParseFile(fset, "", "package p\nfunc _() {\n"+b.code+"\n}\n", parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("Go block parses neither as declarations nor as a function body: %v", err)
		}
		for _, s := range f.Decls[0].(*ast.FuncDecl).Body.List {
			for _, n := range stmtNames(s) {
				if n != "_" && !slices.Contains(locals, n) {
					locals = append(locals, n)
				}
				declared[n] = true
			}
		}
	}
	imports := map[string]string{}
	collect := func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && !declared[id.Name] {
				if path, ok := pkgs[id.Name]; ok {
					imports[id.Name] = path
				}
			}
		}
		return true
	}
	ast.Inspect(f, collect)
	ast.Inspect(ctxFile, collect)

	var src strings.Builder
	src.WriteString("package snippet\n\n")
	names := make([]string, 0, len(imports))
	for n := range imports {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&src, "import %s %q\n", n, imports[n])
	}
	src.WriteString(contextDecls(b.context))
	if topLevel {
		fmt.Fprintf(&src, "\n//line %s:%d\n%s", b.file, b.line, b.code)
		return []byte(src.String()), nil
	}
	src.WriteString("\nfunc _() {\n")
	fmt.Fprintf(&src, "//line %s:%d\n", b.file, b.line)
	src.WriteString(b.code)
	src.WriteString("\n")
	for _, n := range locals {
		fmt.Fprintf(&src, "\t_ = %s\n", n)
	}
	src.WriteString("}\n")
	return []byte(src.String()), nil
}

// contextDecls turns a go-context comment ("var a T; func f() error") into declarations, one
// per line.
func contextDecls(c string) string {
	if c == "" {
		return ""
	}
	var b strings.Builder
	for _, d := range strings.Split(c, ";") {
		b.WriteString(strings.TrimSpace(d))
		b.WriteString("\n")
	}
	return b.String()
}

func declNames(d ast.Decl) []string {
	switch d := d.(type) {
	case *ast.FuncDecl:
		return []string{d.Name.Name}
	case *ast.GenDecl:
		var out []string
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.ValueSpec:
				for _, n := range s.Names {
					out = append(out, n.Name)
				}
			case *ast.TypeSpec:
				out = append(out, s.Name.Name)
			}
		}
		return out
	}
	return nil
}

func stmtNames(s ast.Stmt) []string {
	switch s := s.(type) {
	case *ast.AssignStmt:
		if s.Tok != token.DEFINE {
			return nil
		}
		var out []string
		for _, e := range s.Lhs {
			if id, ok := e.(*ast.Ident); ok {
				out = append(out, id.Name)
			}
		}
		return out
	case *ast.DeclStmt:
		return declNames(s.Decl)
	}
	return nil
}

// modulePackages maps a package name to its import path: the standard library packages that
// documentation uses, and every package of this module (named by the package clause of its
// first non-test file).
func modulePackages(t *testing.T, root string) map[string]string {
	t.Helper()
	pkgs := map[string]string{}
	for _, p := range []string{
		"bytes", "cmp", "context", "crypto/rand", "database/sql", "encoding/json", "errors", "fmt",
		"io", "log", "log/slog", "net", "net/http", "net/http/httptest", "net/url", "os",
		"os/signal", "strconv", "strings", "sync", "syscall", "time",
	} {
		pkgs[p[strings.LastIndexByte(p, '/')+1:]] = p
	}
	// Modules of other projects that the documentation shows idem with.
	pkgs["retryablehttp"] = "github.com/hashicorp/go-retryablehttp"
	pkgs["grpc"] = "google.golang.org/grpc"
	pkgs["pgx"] = "github.com/jackc/pgx/v5"
	pkgs["pgxpool"] = "github.com/jackc/pgx/v5/pgxpool"
	pkgs["jetstream"] = "github.com/nats-io/nats.go/jetstream"
	mod := "github.com/idemkit/idem"
	clause := regexp.MustCompile(`(?m)^package (\w+)`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || (name == "bench" || name == "tmp" || name == "dist") && filepath.Dir(path) == root) {
			return filepath.SkipDir
		}
		entries, _ := os.ReadDir(path)
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			src, err := os.ReadFile(filepath.Join(path, e.Name()))
			if err != nil {
				return err
			}
			if m := clause.FindSubmatch(src); m != nil && string(m[1]) != "main" {
				rel, _ := filepath.Rel(root, path)
				imp := mod
				if rel != "." {
					imp += "/" + filepath.ToSlash(rel)
				}
				if strings.Contains(imp, "/internal/") {
					break
				}
				pkgs[string(m[1])] = imp
			}
			break
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}
