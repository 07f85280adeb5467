package idemhttp_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, want string
		ok       bool
	}{
		{`abc`, "abc", true},
		{`"abc"`, "abc", true},
		{`  "abc"	`, "abc", true},
		{`8e03978e-40d5-43e8-bc93-6894a57f9324`, "8e03978e-40d5-43e8-bc93-6894a57f9324", true},
		{`"a \"quoted\" key \\ with escapes"`, `a "quoted" key \ with escapes`, true},
		{`a b`, "a b", true},
		{`ab"c`, `ab"c`, true},
		{strings.Repeat("k", 255), strings.Repeat("k", 255), true},
		{`"` + strings.Repeat("k", 255) + `"`, strings.Repeat("k", 255), true},
		{``, "", false},
		{`   `, "", false},
		{`""`, "", false},
		{`"abc`, "", false},
		{`"abc"x`, "", false},
		{`"abc";p=1`, "", false},
		// A key is one sf-string: a list on one line is refused, as two lines are.
		{`k1, k2`, "", false},
		{`k1,k2`, "", false},
		{`k1,`, "", false},
		{`"k1", "k2"`, "", false},
		{`"k1","k2"`, "", false},
		{`"k1,k2"`, "k1,k2", true},
		{`"a\nb"`, "", false},
		{`"a\`, "", false},
		{`"tab	in"`, "", false},
		{strings.Repeat("k", 256), "", false},
		{`"` + strings.Repeat("k", 256) + `"`, "", false},
		{"k\x00", "", false},
		{"kéy", "", false},
	}
	for _, tc := range cases {
		got, err := idemhttp.ParseKey(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// FuzzParseKey: no panic; an accepted key is valid; a valid key round-trips bare (when it is
// a bare value) and quoted.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`abc`, `"abc"`, `"a\"b\\c"`, `"`, `""`, `"a";x`, " \t", strings.Repeat("x", 255), "é", `k1, k2`, `"k1", "k2"`, `"k,1"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := idemhttp.ParseKey(v)
		if err != nil {
			return
		}
		if !idemhttp.ValidKey(k) || !utf8.ValidString(k) {
			t.Fatalf("ParseKey(%q) accepted invalid %q", v, k)
		}
		q := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
		if k2, err := idemhttp.ParseKey(q); err != nil || k2 != k {
			t.Fatalf("quoted form %q of %q parsed as %q, %v", q, k, k2, err)
		}
		if trimmed := strings.Trim(k, " \t"); trimmed == k && k[0] != '"' && !strings.Contains(k, ",") {
			if k2, err := idemhttp.ParseKey(k); err != nil || k2 != k {
				t.Fatalf("bare %q parsed as %q, %v", k, k2, err)
			}
		}
	})
}

func TestStorageKeyAndScope(t *testing.T) {
	t.Parallel()
	if got := idemhttp.StorageKey("t1", "k"); got != "t1|k" {
		t.Fatal(got)
	}
	for _, s := range []string{"", "acct_1", idemhttp.HashScope("secret"), "Zürich"} {
		if !idemhttp.ValidScope(s) {
			t.Errorf("ValidScope(%q) = false", s)
		}
	}
	for _, s := range []string{"a|b", "a\nb", strings.Repeat("s", idemhttp.MaxScopeLen+1), "\xff"} {
		if idemhttp.ValidScope(s) {
			t.Errorf("ValidScope(%q) = true", s)
		}
	}
	if h := idemhttp.HashScope("secret"); len(h) != 64 || strings.Contains(h, "secret") {
		t.Fatal(h)
	}
}

// A key header under another spelling that CGI-style applications read as Idempotency-Key
// (HTTP_IDEMPOTENCY_KEY) is refused, alone or beside the real one: on a route where the key is
// optional, the middleware would pass the request through unkeyed while the application read a
// key and took the request for one made safe to retry. Nothing runs.
func TestKeyHeaderSpelling(t *testing.T) {
	t.Parallel()
	h := &charge{}
	b := setup(t, nil, idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()}, h)
	for _, hdr := range []string{"Idempotency_Key", "IDEMPOTENCY_KEY", "idempotency_key"} {
		for _, key := range []string{"", "k1"} {
			r := b.do("POST", "/", key, "x", hdr, "k1")
			if r.Status != 400 || problemType(t, r) != idemhttp.ProblemInvalidKey {
				t.Errorf("%s (Idempotency-Key %q): %d %s, want 400 %s", hdr, key, r.Status, r.Body, idemhttp.ProblemInvalidKey)
			}
		}
	}
	if n := h.n.Load(); n != 0 {
		t.Fatalf("the handler ran %d times", n)
	}
	if r := b.do("POST", "/", "k1", "x", "Idempotency-Keys", "x"); r.Status != 201 {
		t.Fatalf("another header whose name is close: %d %s", r.Status, r.Body)
	}
}
