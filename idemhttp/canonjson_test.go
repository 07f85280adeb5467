package idemhttp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{" [ 1 , 2 ,\n3 ] ", `[1,2,3]`},
		{`1.0`, `1`},
		{`1e0`, `1`},
		{`10e-1`, `1`},
		{`100`, `1e2`},
		{`0.5`, `5e-1`},
		{`-0.0e5`, `0`},
		{`-12.340`, `-1234e-2`},
		{`1E+2`, `1e2`},
		{`"\u0041\/\n\u00e9"`, `"A/\u000aé"`},
		{`"\ud83d\ude00"`, `"😀"`},
		{`{"z":{"y":[{"b":true,"a":null}]},"a":false}`, `{"a":false,"z":{"y":[{"a":null,"b":true}]}}`},
		{`{}`, `{}`},
		{`[]`, `[]`},
	}
	for _, tc := range cases {
		got, err := idemhttp.CanonicalJSON([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("CanonicalJSON(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	got, err := idemhttp.CanonicalJSON([]byte(`{"ts":1,"a":{"ts":2,"b":[{"ts":3,"c":4}]}}`), "ts", "a.b.ts")
	if err != nil || string(got) != `{"a":{"b":[{"c":4}],"ts":2}}` {
		t.Errorf("ignore: %s %v", got, err)
	}
	for _, bad := range []string{``, `{`, `{"a":1,"a":2}`, `[1,]`, `01`, `1.`, `.5`, `"\x01"`, "\"\xff\"", `"\ud800"`, `1e1234567890123456`,
		`tru`, `{"a" 1}`, `[1] [2]`, strings.Repeat("[", 300) + strings.Repeat("]", 300)} {
		if _, err := idemhttp.CanonicalJSON([]byte(bad)); !errors.Is(err, idemhttp.ErrInvalidJSON) {
			t.Errorf("CanonicalJSON(%.40q) = %v, want ErrInvalidJSON", bad, err)
		}
	}
}

func TestRawFingerprintIsIdemFingerprint(t *testing.T) {
	t.Parallel()
	r, _ := http.NewRequest("POST", "http://x/v1/charges?a=1", nil)
	// Small bodies are laid out on the stack, larger ones in a pooled buffer: both alike.
	for _, n := range []int{0, 12, 400, 471, 472, 473, 600, 5000, 100_000} {
		body := []byte(strings.Repeat("b", n))
		got, _ := idemhttp.RawFingerprint(r, body)
		if want := idem.Fingerprint([]byte("POST"), []byte("/v1/charges"), []byte("a=1"), body); got != want {
			t.Fatalf("body of %d bytes: %s != %s", n, got, want)
		}
	}
	// Many digests, so that every hex digit comes out at every position.
	for i := range 2000 {
		body := []byte(strconv.Itoa(i))
		got, _ := idemhttp.RawFingerprint(r, body)
		if want := idem.Fingerprint([]byte("POST"), []byte("/v1/charges"), []byte("a=1"), body); got != want {
			t.Fatalf("body %q: %s != %s", body, got, want)
		}
	}
}

// FuzzCanonicalJSON: no panic; accepted input is JSON, its canonical form is JSON, is a fixed
// point, and means what the input means (compared through encoding/json).
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.0,2e3,-0,"x\u00e9"]}`, `[]`, `"\ud83d\ude00"`, `{"a":{"b":{}}}`, `1E-7`, `null`, `{"a":1,"a":2}`, `[`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := idemhttp.CanonicalJSON(in)
		if err != nil {
			if !errors.Is(err, idemhttp.ErrInvalidJSON) {
				t.Fatalf("error %v does not wrap ErrInvalidJSON", err)
			}
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted invalid JSON %q", in)
		}
		if !json.Valid(out) {
			t.Fatalf("canonical form %q of %q is not JSON", out, in)
		}
		again, err := idemhttp.CanonicalJSON(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point: %q → %q → %q (%v)", in, out, again, err)
		}
		// Same meaning: decoding both with exact numbers gives equal values.
		if a, b := decode(t, in), decode(t, out); !equalJSON(a, b) {
			t.Fatalf("meaning changed: %q → %q", in, out)
		}
	})
}

func decode(t *testing.T, b []byte) any {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// equalJSON compares decoded values; numbers by their canonical form (exact decimal value).
func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !equalJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if len(x) < 40 && len(y) < 40 && smallExp(string(x)) && smallExp(string(y)) {
			rx, ok1 := new(big.Rat).SetString(string(x))
			ry, ok2 := new(big.Rat).SetString(string(y))
			return ok1 && ok2 && rx.Cmp(ry) == 0
		}
		cx, err1 := idemhttp.CanonicalJSON([]byte(x))
		cy, err2 := idemhttp.CanonicalJSON([]byte(y))
		return err1 == nil && err2 == nil && bytes.Equal(cx, cy)
	default:
		return a == b
	}
}

// smallExp reports whether a number's exponent is small enough for big.Rat.
func smallExp(n string) bool {
	i := strings.IndexAny(n, "eE")
	if i < 0 {
		return true
	}
	e := strings.TrimLeft(n[i+1:], "+-")
	return len(strings.TrimLeft(e, "0")) <= 3
}
