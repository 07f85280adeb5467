package idemlambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
	"github.com/idemkit/idem/store/memstore"
)

// runCounter wraps a handler that counts its runs and answers with the run's number.
func runCounter(t *testing.T, opt idemlambda.Options) (func(context.Context, json.RawMessage) (int, error), *int) {
	t.Helper()
	runs := new(int)
	if opt.Runner == nil {
		opt.Runner = newEngine(t, idem.Options{})
	}
	opt.Logger = quiet
	h, err := idemlambda.Wrap(opt, func(ctx context.Context, ev json.RawMessage) (int, error) { *runs++; return *runs, nil })
	if err != nil {
		t.Fatal(err)
	}
	return h, runs
}

// Distinct JSON values at the key path are distinct keys, whatever their types or text; the
// same value written two ways is one key.
func TestKeyValuesApart(t *testing.T) {
	t.Parallel()
	objHash := func(obj string) string {
		// What an object key used to be stored as, and what "#json:" values look like.
		return fmt.Sprintf(`"#json:%s"`, strings.ReplaceAll(obj, `"`, `\"`))
	}
	apart := [][2]string{
		{`5`, `"5"`}, {`true`, `"true"`}, {`false`, `"false"`}, {`5`, `"#num:5"`}, {`true`, `"#bool:true"`},
		{`{"a":1}`, objHash(`{"a":1}`)}, {`{"a":1}`, `"sha256:015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"`},
		{`["a","b"]`, `["a,b"]`}, {`[1,2]`, `[12]`}, {`[1,[2]]`, `[[1],2]`}, {`0.1`, `0.10000000000000001`}, {`"#x"`, `"#str:#x"`},
		{`"` + strings.Repeat("k", 600) + `"`, `"` + strings.Repeat("k", 601) + `"`},
	}
	for _, tc := range apart {
		h, runs := runCounter(t, idemlambda.Options{KeyPath: "id", RequireKey: true})
		for _, v := range []string{tc[0], tc[1], tc[0], tc[1]} {
			if _, err := h(context.Background(), json.RawMessage(`{"id":`+v+`}`)); err != nil {
				t.Fatalf("%s: %v", v, err)
			}
		}
		if *runs != 2 {
			t.Errorf("%s and %s: handler ran %d times, want 2 (two keys)", tc[0], tc[1], *runs)
		}
	}
	same := [][2]string{{`5`, `5.0`}, {`50`, `5e1`}, {`0`, `-0`}, {`{"a":1,"b":[2]}`, `{"b":[2.0],"a":1}`}, {`"x"`, `"\u0078"`}}
	for _, tc := range same {
		h, _ := runCounter(t, idemlambda.Options{KeyPath: "id", RequireKey: true})
		for _, v := range []string{tc[0], tc[1]} {
			if n, err := h(context.Background(), json.RawMessage(`{"id":`+v+`}`)); err != nil || n != 1 {
				t.Fatalf("%s: %d %v", v, n, err)
			}
		}
	}
}

// The stored keys: a plain string as it is (so keys stored by earlier versions are found),
// every other value tagged; arrays and strings inside a "#json:" value written as JSON writes
// them, with '"', '\' and control characters (not a space) escaped.
func TestStoredKeys(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	eng, _ := idem.New(st, idem.Options{Logger: quiet})
	h, _ := runCounter(t, idemlambda.Options{Runner: eng, KeyPath: "id", Name: "fn"})
	for v, key := range map[string]string{
		`"order-1"`: "fn|order-1", `"#1"`: "fn|#str:#1", `12.50`: "fn|#num:12.5", `true`: "fn|#bool:true",
		`{"b":1,"a":"x"}`:             `fn|#json:{"a":"x","b":1}`,
		`[1,"a\"b\\c\u001f\u0001 d"]`: `fn|#json:[1,"a\"b\\c\u001f\u0001 d"]`,
		`{"k\u0009":[true]}`:          `fn|#json:{"k\u0009":[true]}`,
		// Numbers at the edges of canonNumber's three shapes.
		`-5`: "fn|#num:-5", `0.5`: "fn|#num:0.5", `0.050`: "fn|#num:0.05",
		`1e20`: "fn|#num:100000000000000000000", `1e21`: "fn|#num:1e21",
		`1e-21`: "fn|#num:0.000000000000000000001", `1e-22`: "fn|#num:1e-22",
		`1.23456789012345678901`: "fn|#num:1.23456789012345678901", `1.234567890123456789012`: "fn|#num:1234567890123456789012e-21",
	} {
		if _, err := h(context.Background(), json.RawMessage(`{"id":`+v+`}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Get(context.Background(), key); err != nil {
			t.Errorf("%s: no record %q: %v", v, key, err)
		}
	}
}

// Several fields make one key: two users' orders with the same id are two keys; an event
// missing any part has no key.
func TestKeyPathsTuple(t *testing.T) {
	t.Parallel()
	h, runs := runCounter(t, idemlambda.Options{KeyPaths: []string{"user", "order.id"}})
	ev := func(user, order string) json.RawMessage {
		return json.RawMessage(`{"user":` + user + `,"order":{"id":` + order + `}}`)
	}
	for _, e := range []json.RawMessage{ev(`"u1"`, `7`), ev(`"u2"`, `7`), ev(`"u1"`, `7`), ev(`"u2"`, `7.0`), ev(`"u1"`, `"7"`)} {
		if _, err := h(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if *runs != 3 {
		t.Fatalf("handler ran %d times, want 3 (u1/7, u2/7, u1/\"7\")", *runs)
	}
	// Parts are kept apart: ("a,b","c") and ("a","b,c") are two keys.
	if _, err := h(context.Background(), ev(`"a,b"`, `"c"`)); err != nil {
		t.Fatal(err)
	}
	if _, err := h(context.Background(), ev(`"a"`, `"b,c"`)); err != nil {
		t.Fatal(err)
	}
	if *runs != 5 {
		t.Fatalf("handler ran %d times, want 5", *runs)
	}
	// A partial key is no key: runs unprotected, or fails with RequireKey.
	for range 2 {
		if _, err := h(context.Background(), ev(`null`, `7`)); err != nil {
			t.Fatal(err)
		}
	}
	if *runs != 7 {
		t.Fatalf("an event missing a part was deduplicated: %d runs, want 7", *runs)
	}
	strict, _ := runCounter(t, idemlambda.Options{KeyPaths: []string{"user", "order.id"}, RequireKey: true})
	for _, e := range []json.RawMessage{ev(`""`, `7`), ev(`"u1"`, `{}`), ev(`null`, `null`)} {
		if _, err := strict(context.Background(), e); !errors.Is(err, idemlambda.ErrMissingKey) {
			t.Fatalf("%s: %v, want ErrMissingKey", e, err)
		}
	}
	if _, err := idemlambda.Wrap(idemlambda.Options{Runner: newEngine(t, idem.Options{}), KeyPath: "a", KeyPaths: []string{"b"}},
		func(context.Context, string) (string, error) { return "", nil }); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("KeyPath and KeyPaths: %v", err)
	}
	if _, err := idemlambda.Wrap(idemlambda.Options{Runner: newEngine(t, idem.Options{}), KeyPaths: []string{"a", ""}},
		func(context.Context, string) (string, error) { return "", nil }); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("an empty path in KeyPaths: %v", err)
	}
}
