package optioncheck_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/store/sweeper"
)

// The one hook rule: every face reports what happened to each request, call, message or
// invocation through an OnEvent func(Event) field of its options, whose Event says it in an
// Outcome field; spans come from the engine's idem.Options.Observer (Begin/End), which every
// face's runner carries. No face has a second reporting hook. The one other hook is
// consumer.Options.Trace, which derives the context a message is handled under (a trace
// continued from its headers) and ends with the same Event.
//
// (idemfiber, a module of its own, checks the rule on itself.)
var faces = []struct {
	options reflect.Type
	outcome bool // the Event has an Outcome field of the package's Outcome type
}{
	{reflect.TypeFor[idemhttp.Options](), true},
	{reflect.TypeFor[idemgrpc.ServerOptions](), true},
	{reflect.TypeFor[consumer.Options](), true},
	{reflect.TypeFor[idemlambda.Options](), true},
	{reflect.TypeFor[idemlambda.ProxyOptions](), true},
	{reflect.TypeFor[sweeper.Options](), true},
	{reflect.TypeFor[outbox.RelayOptions](), true},
	{reflect.TypeFor[idemclient.Options](), false}, // a client's Event reports attempts, retries and give-ups by Kind
}

// TestOneHookShape checks the rule on every face's options.
func TestOneHookShape(t *testing.T) {
	t.Parallel()
	for _, f := range faces {
		name := f.options.String()
		hook, ok := f.options.FieldByName("OnEvent")
		if !ok {
			t.Errorf("%s has no OnEvent", name)
			continue
		}
		ht := hook.Type
		if ht.Kind() != reflect.Func || ht.NumIn() != 1 || ht.NumOut() != 0 || ht.In(0).Name() != "Event" ||
			ht.In(0).PkgPath() != f.options.PkgPath() || ht.In(0).Kind() != reflect.Struct {
			t.Errorf("%s.OnEvent is %s, want func(Event) with the package's Event", name, ht)
			continue
		}
		if f.outcome {
			o, ok := ht.In(0).FieldByName("Outcome")
			if !ok || o.Type.Name() != "Outcome" || o.Type.PkgPath() != f.options.PkgPath() {
				t.Errorf("%s's Event has no Outcome field of the package's Outcome type", name)
			}
		}
		for i := range f.options.NumField() {
			fl := f.options.Field(i)
			if !fl.IsExported() || fl.Name == "OnEvent" {
				continue
			}
			second := strings.HasPrefix(fl.Name, "On") || strings.HasPrefix(fl.Name, "Observe") ||
				fl.Type.Kind() == reflect.Interface && strings.HasSuffix(fl.Type.Name(), "Observer")
			if fl.Name == "Trace" && f.options == reflect.TypeFor[consumer.Options]() {
				tr := fl.Type // func(ctx, *Message) (context.Context, func(Event))
				if tr.NumOut() != 2 || tr.Out(1) != reflect.FuncOf([]reflect.Type{ht.In(0)}, nil, false) {
					t.Errorf("consumer.Options.Trace is %s: its end func must take the Event OnEvent gets", tr)
				}
				continue
			}
			if second {
				t.Errorf("%s.%s (%s) is a second hook: report through OnEvent", name, fl.Name, fl.Type)
			}
		}
	}
}

// label is what an Outcome value must look like: a short lowercase label.
var label = regexp.MustCompile(`^[a-z][a-z_]{1,15}$`)

// TestOutcomeConstants: every constant of an Outcome type (the engine's and each face's) is
// named Outcome… after its value, a short lowercase label, and one
// word has one name in every package that says it.
func TestOutcomeConstants(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	words := map[string]map[string]bool{} // label → constant names that use it
	inDir := map[string]map[string]bool{} // package directory → its labels
	for _, dir := range []string{".", "idemhttp", "idemgrpc", "consumer", "idemlambda", "store/sweeper", "outbox"} {
		consts := typedConstants(t, filepath.Join(root, dir), "Outcome")
		if len(consts) == 0 {
			t.Errorf("%s: no Outcome constants found", dir)
		}
		for name, value := range consts {
			if !strings.HasPrefix(name, "Outcome") {
				t.Errorf("%s: %s is of type Outcome but not named Outcome…", dir, name)
			}
			if !label.MatchString(value) {
				t.Errorf("%s: %s = %q is not a short lowercase label", dir, name, value)
			} else if want := "Outcome" + camel(value); name != want {
				t.Errorf("%s: %s = %q: a constant is named after its word, %s", dir, name, value, want)
			}
			if inDir[dir] == nil {
				inDir[dir] = map[string]bool{}
			}
			inDir[dir][value] = true
			if words[value] == nil {
				words[value] = map[string]bool{}
			}
			words[value][name] = true
		}
	}
	// One word, one constant name, whichever package says it: "replay" is OutcomeReplay
	// everywhere, never OutcomeReplayed in one package and OutcomeDuplicate in another.
	for w, names := range words {
		if len(names) > 1 {
			t.Errorf("the outcome %q is named %v: one word, one name", w, keys(names))
		}
	}
	// The words the engine and the faces share for the same event.
	for _, w := range []string{string(idem.OutcomeReplay), string(idem.OutcomeInFlight), string(idem.OutcomeMismatch),
		string(idem.OutcomeReleased), string(idem.OutcomeUncertain), string(idem.OutcomeStoreError)} {
		if w != string(idemhttp.Outcome(w)) || !words[w]["Outcome"+camel(w)] {
			t.Errorf("engine outcome %q has no face constant Outcome%s", w, camel(w))
		}
	}
	for _, o := range []idemhttp.Outcome{idemhttp.OutcomeReplay, idemhttp.OutcomeInFlight} {
		if string(o) != string(idemgrpc.Outcome(o)) || !inDir["consumer"][string(o)] {
			t.Errorf("%q is not a consumer outcome too", o)
		}
	}
}

// typedConstants returns the constants of type typ declared in the non-test Go files of dir,
// with their string literal values ("" for those without one, as iota constants).
func typedConstants(t *testing.T, dir, typ string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, path := range matches {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			inOutcome := false // iota continuation of an Outcome spec
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				if vs.Type != nil {
					id, ok := vs.Type.(*ast.Ident)
					inOutcome = ok && id.Name == typ
				} else if len(vs.Values) > 0 {
					inOutcome = false
				}
				if !inOutcome {
					continue
				}
				for i, n := range vs.Names {
					v := ""
					if i < len(vs.Values) {
						if bl, ok := vs.Values[i].(*ast.BasicLit); ok && bl.Kind == token.STRING {
							v, _ = strconv.Unquote(bl.Value)
						}
					}
					out[n.Name] = v
				}
			}
		}
	}
	return out
}

// camel turns a label into the end of its constant's name: "in_flight" → "InFlight", "ok" →
// "OK" (an initialism, as Go spells it).
func camel(label string) string {
	var b strings.Builder
	for _, p := range strings.Split(label, "_") {
		if p == "ok" {
			b.WriteString("OK")
		} else if p != "" {
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
	}
	return b.String()
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestConstantsNamedAfterType: the root package's enumerations read as values, not as
// functions: each constant is named after its type (DispositionRelease, not Release).
func TestConstantsNamedAfterType(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	for typ, prefix := range map[string]string{"Disposition": "Disposition", "Stage": "Stage", "UncertainPolicy": "Uncertain", "Outcome": "Outcome"} {
		consts := typedConstants(t, root, typ)
		if len(consts) < 3 {
			t.Errorf("%s: %d constants found", typ, len(consts))
		}
		for name := range consts {
			if !strings.HasPrefix(name, prefix) {
				t.Errorf("idem.%s is a %s: name it %s…", name, typ, prefix)
			}
		}
	}
	// "hold" is the uncertain policy's word alone; a policy's verdict that the outcome is
	// uncertain says so.
	if got := idem.DispositionUncertain.String(); got != "uncertain" {
		t.Errorf("DispositionUncertain.String() = %q, want uncertain", got)
	}
	if got := idem.UncertainHold.String(); got != "hold" {
		t.Errorf("UncertainHold.String() = %q, want hold", got)
	}
}
