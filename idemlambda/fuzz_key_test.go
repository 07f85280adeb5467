package idemlambda

import (
	"encoding/json"
	"math/big"
	"strings"
	"testing"
)

// FuzzKeyEncoding checks that the key encoding is injective and canonical: two JSON values get
// one storage key if and only if they are the same value (numbers compared as numbers, objects
// field by field), whether alone or as parts of a tuple (Options.KeyPaths).
func FuzzKeyEncoding(f *testing.F) {
	for _, s := range [][2]string{
		{`5`, `"5"`}, {`true`, `"true"`}, {`"#num:5"`, `5`}, {`"#bool:true"`, `true`},
		{`{"a":1}`, `"#json:{\"a\":1}"`}, {`5`, `5.0`}, {`50`, `5e1`}, {`-0`, `0`}, {`0.5`, `5e-1`},
		{`1e21`, `1000000000000000000000`}, {`1e22`, `10000000000000000000000`}, {`1e-7`, `0.0000001`},
		{`{"a":1,"b":2}`, `{"b":2,"a":1.0}`}, {`["a","b"]`, `["a,b"]`}, {`[1,[2]]`, `[[1],2]`},
		{`"` + strings.Repeat("x", 600) + `"`, `"` + strings.Repeat("x", 601) + `"`},
		{`"sha256:0123"`, `"#sha256:0123"`}, {`"\u0000"`, `"\u0001"`}, {`"a\"b"`, `"a\\\"b"`},
		{`123456789012345678901234567890`, `1.2345678901234567890123456789e29`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		va, erra := decode([]byte(a))
		vb, errb := decode([]byte(b))
		if erra != nil || errb != nil || empty(va) || empty(vb) || !small(va) || !small(vb) {
			return
		}
		same := sameValue(va, vb)
		ka, kb := storageKey("fn", encodeKey(va)), storageKey("fn", encodeKey(vb))
		if (ka == kb) != same {
			t.Fatalf("%s and %s: keys %q and %q, same value %v", a, b, ka, kb, same)
		}
		// As parts of a tuple, in both orders.
		ta, tb := storageKey("fn", encodeTuple([]any{va, vb})), storageKey("fn", encodeTuple([]any{vb, va}))
		if (ta == tb) != same {
			t.Fatalf("tuples of %s and %s: %q and %q, same value %v", a, b, ta, tb, same)
		}
		if encodeTuple([]any{va}) == encodeKey(va) {
			t.Fatalf("a tuple of one %s is its value's key", a)
		}
	})
}

// small reports whether every number in v has an exponent big.Rat can compare quickly.
func small(v any) bool {
	switch x := v.(type) {
	case json.Number:
		_, exp, _ := strings.Cut(strings.ToLower(string(x)), "e")
		return len(exp) < 5 && len(x) < 200
	case []any:
		for _, m := range x {
			if !small(m) {
				return false
			}
		}
	case map[string]any:
		for _, m := range x {
			if !small(m) {
				return false
			}
		}
	}
	return true
}

// sameValue is JSON value equality, numbers compared exactly.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		return okx && oky && rx.Cmp(ry) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, m := range x {
			n, ok := y[k]
			if !ok || !sameValue(m, n) {
				return false
			}
		}
		return true
	}
	return false
}
