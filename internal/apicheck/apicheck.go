package apicheck

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/build"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Package is one public package's API record.
type Package struct {
	// Dir is the package's folder relative to the repository root, with forward slashes ("."
	// for the root package).
	Dir string
	// Lines is the sorted record, one exported name per line.
	Lines []string
}

// skipDirs are the folders whose packages are not part of the public API: internal packages,
// commands, examples, the benchmark module, test data and generated output.
var skipDirs = map[string]bool{
	"internal": true, "cmd": true, "examples": true, "bench": true, "testdata": true,
	"tmp": true, "api": true, "node_modules": true, "vendor": true, "docs": true,
	"deploy": true, "scripts": true,
}

// Collect walks root and returns the API record of every public package under it, sorted by
// folder.
func Collect(root string) ([]Package, error) {
	var pkgs []Package
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (skipDirs[name] || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		p, ok, err := record(path)
		if err != nil {
			return fmt.Errorf("apicheck: %s: %w", rel, err)
		}
		if ok {
			p.Dir = filepath.ToSlash(rel)
			pkgs = append(pkgs, p)
		}
		return nil
	})
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Dir < pkgs[j].Dir })
	return pkgs, err
}

// record reads the non-test Go files of dir (as the go command selects them for this
// platform) and returns their exported API, or ok false when dir holds no library package.
func record(dir string) (Package, bool, error) {
	bp, err := build.ImportDir(dir, 0)
	if err != nil {
		if _, none := err.(*build.NoGoError); none {
			return Package{}, false, nil
		}
		return Package{}, false, err
	}
	if bp.Name == "main" {
		return Package{}, false, nil
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return Package{}, false, err
		}
		files = append(files, f)
	}
	d, err := doc.NewFromFiles(fset, files, bp.ImportPath)
	if err != nil {
		return Package{}, false, err
	}
	w := writer{fset: fset, pkg: bp.Name}
	w.values("const", d.Consts)
	w.values("var", d.Vars)
	w.funcs("", d.Funcs)
	for _, t := range d.Types {
		w.typ(t)
		w.values("const", t.Consts)
		w.values("var", t.Vars)
		w.funcs("", t.Funcs)
		w.funcs(t.Name, t.Methods)
	}
	sort.Strings(w.lines)
	return Package{Lines: w.lines}, true, nil
}

type writer struct {
	fset  *token.FileSet
	pkg   string
	lines []string
}

func (w *writer) add(format string, args ...any) {
	w.lines = append(w.lines, "pkg "+w.pkg+", "+fmt.Sprintf(format, args...))
}

// node prints n on one line.
func (w *writer) node(n any) string {
	var b bytes.Buffer
	if err := (&printer.Config{Mode: printer.RawFormat}).Fprint(&b, w.fset, n); err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// typeParams prints a type parameter list: [K comparable, V any].
func (w *writer) typeParams(l *ast.FieldList) string {
	var parts []string
	for _, f := range l.List {
		var names []string
		for _, n := range f.Names {
			names = append(names, n.Name)
		}
		parts = append(parts, strings.Join(names, ", ")+" "+w.node(f.Type))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// values records the exported names of const or var declarations. An implicit type in a
// const group (iota) repeats the last explicit one, as the language does.
func (w *writer) values(kind string, vals []*doc.Value) {
	for _, v := range vals {
		var last ast.Expr
		for _, spec := range v.Decl.Specs {
			vs := spec.(*ast.ValueSpec)
			typ := vs.Type
			if kind == "const" {
				if typ != nil || len(vs.Values) > 0 {
					last = typ
				}
				typ = last
			}
			for _, n := range vs.Names {
				if !n.IsExported() {
					continue
				}
				if typ != nil {
					w.add("%s %s %s", kind, n.Name, w.node(typ))
				} else {
					w.add("%s %s", kind, n.Name)
				}
			}
		}
	}
}

// funcs records functions, or methods of recv when recv is not empty.
func (w *writer) funcs(recv string, fns []*doc.Func) {
	for _, f := range fns {
		sig := w.node(f.Decl.Type)
		sig = strings.TrimPrefix(sig, "func")
		if recv == "" {
			w.add("func %s%s", f.Name, sig)
			continue
		}
		r := w.node(f.Decl.Recv.List[0].Type)
		w.add("method (%s) %s%s", r, f.Name, sig)
	}
}

// typ records a type: its kind, then one line per exported field or interface method.
func (w *writer) typ(t *doc.Type) {
	for _, spec := range t.Decl.Specs {
		ts := spec.(*ast.TypeSpec)
		if !ts.Name.IsExported() {
			continue
		}
		name := ts.Name.Name
		if ts.TypeParams != nil {
			name += w.typeParams(ts.TypeParams)
		}
		if ts.Assign.IsValid() {
			name += " ="
		}
		switch u := ts.Type.(type) {
		case *ast.StructType:
			w.add("type %s struct", name)
			for _, f := range u.Fields.List {
				ft := w.node(f.Type)
				if len(f.Names) == 0 {
					w.add("type %s struct, embedded %s", ts.Name.Name, ft)
				}
				for _, n := range f.Names {
					if n.IsExported() {
						w.add("type %s struct, %s %s", ts.Name.Name, n.Name, ft)
					}
				}
			}
		case *ast.InterfaceType:
			w.add("type %s interface", name)
			for _, m := range u.Methods.List {
				if len(m.Names) == 0 {
					w.add("type %s interface, embedded %s", ts.Name.Name, w.node(m.Type))
				}
				for _, n := range m.Names {
					if n.IsExported() {
						w.add("type %s interface, %s%s", ts.Name.Name, n.Name, strings.TrimPrefix(w.node(m.Type), "func"))
					}
				}
			}
		default:
			w.add("type %s %s", name, w.node(ts.Type))
		}
	}
}
