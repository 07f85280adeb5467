package idem_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

func TestCheckScope(t *testing.T) {
	t.Parallel()
	good := []string{
		"",
		"billing",
		"billing/eu", // a slash is an ordinary character of a scope
		"tenant 42",
		"ключ",
		strings.Repeat("s", idem.MaxScopeLen),
		strings.Repeat("я", idem.MaxScopeLen/2),
		"\x7e", // the last printable ASCII byte
		"\x20",
	}
	for _, s := range good {
		if err := idem.CheckScope(s); err != nil {
			t.Errorf("CheckScope(%.30q) = %v, want nil", s, err)
		}
		if !idem.ValidScope(s) {
			t.Errorf("ValidScope(%.30q) = false, want true", s)
		}
	}
	bad := map[string]string{
		"billing|eu":                            "separator",
		"|":                                     "separator",
		"billing|":                              "separator",
		"a\x00":                                 "control character 0x00",
		"a\x1f":                                 "control character 0x1f",
		"a\nb":                                  "control character 0x0a",
		"a\x7f":                                 "control character 0x7f",
		"a\xff":                                 "UTF-8",
		strings.Repeat("s", idem.MaxScopeLen+1): "longer than 200",
	}
	for s, want := range bad {
		err := idem.CheckScope(s)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckScope(%.30q) = %v, want ErrInvalidInput saying %q", s, err, want)
		}
		if idem.ValidScope(s) {
			t.Errorf("ValidScope(%.30q) = true, want false", s)
		}
	}
}

func TestCheckScopeDoesNotRepeatTheScope(t *testing.T) {
	t.Parallel()
	err := idem.CheckScope("secret-api-key|x")
	if err == nil || strings.Contains(err.Error(), "secret-api-key") {
		t.Fatalf("CheckScope = %v, want an error that does not quote the scope", err)
	}
}

func TestScopedKeyIsUnambiguous(t *testing.T) {
	t.Parallel()
	// The pairs a join with "/" (or any separator allowed in scopes) merges.
	pairs := [][2]string{
		{"billing", "eu/1"},
		{"billing/eu", "1"},
		{"billing", "eu|1"},
		{"", "billing|1"},
		{"billing", "1"},
		{"", "1"},
		{"", "|1"},
		{"billing", ""},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		k := idem.ScopedKey(p[0], p[1])
		if q, dup := seen[k]; dup {
			t.Errorf("ScopedKey(%q, %q) = ScopedKey(%q, %q) = %q", p[0], p[1], q[0], q[1], k)
		}
		seen[k] = p
		scope, key, ok := idem.SplitScopedKey(k)
		if !ok || scope != p[0] || key != p[1] {
			t.Errorf("SplitScopedKey(%q) = %q, %q, %v, want %q, %q, true", k, scope, key, ok, p[0], p[1])
		}
	}
	if got := idem.ScopedKey("billing", "eu/1"); got != "billing|eu/1" {
		t.Errorf("ScopedKey(billing, eu/1) = %q, want billing|eu/1", got)
	}
	if got := idem.ScopedKey("", "k"); got != "|k" {
		t.Errorf(`ScopedKey("", k) = %q, want |k: the empty scope keeps its separator`, got)
	}
}

func TestSplitScopedKeyRefusesWhatScopedKeyCannotMake(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"",
		"no-separator",
		"bad\nscope|k",
		strings.Repeat("s", idem.MaxScopeLen+1) + "|k",
		"\xff|k",
	} {
		if scope, key, ok := idem.SplitScopedKey(s); ok || scope != "" || key != "" {
			t.Errorf("SplitScopedKey(%.30q) = %q, %q, %v, want empty and false", s, scope, key, ok)
		}
	}
	// The longest scope still splits.
	long := strings.Repeat("s", idem.MaxScopeLen)
	if scope, key, ok := idem.SplitScopedKey(long + "|k|j"); !ok || scope != long || key != "k|j" {
		t.Errorf("SplitScopedKey(long scope) = %.10q, %q, %v", scope, key, ok)
	}
}

// The longest scope and the longest client key make a storage key the engine accepts.
func TestScopedKeyFitsTheStorageKey(t *testing.T) {
	t.Parallel()
	k := idem.ScopedKey(strings.Repeat("s", idem.MaxScopeLen), strings.Repeat("k", idem.MaxClientKeyLen))
	if err := idem.CheckKey(k); err != nil {
		t.Fatalf("CheckKey of the longest scoped key = %v", err)
	}
	if err := idem.CheckKey(idem.ScopedKey("", "")); err != nil {
		t.Fatalf("CheckKey of the shortest scoped key = %v", err)
	}
}

// FuzzScopedKey checks that the join round-trips and is injective: a storage key names exactly
// one (scope, key) pair, whatever either holds, and with a key a client may send it is a valid
// storage key.
func FuzzScopedKey(f *testing.F) {
	f.Add("billing", "eu/1", "billing/eu", "1")
	f.Add("billing", "eu|1", "", "billing|1")
	f.Add("billing|eu", "1", "billing", "eu|1") // a scope holding the separator is refused
	f.Add("", "|", "", "|")
	f.Add("a", "", "", "a|")
	f.Add("ключ", "k\x00", "\x7f", "k")
	f.Fuzz(func(t *testing.T, s1, k1, s2, k2 string) {
		j1, j2 := idem.ScopedKey(s1, k1), idem.ScopedKey(s2, k2)
		if !idem.ValidScope(s1) {
			if err := idem.CheckScope(s1); !errors.Is(err, idem.ErrInvalidInput) {
				t.Fatalf("CheckScope(%q) = %v, want ErrInvalidInput", s1, err)
			}
			return
		}
		scope, key, ok := idem.SplitScopedKey(j1)
		if !ok || scope != s1 || key != k1 {
			t.Fatalf("SplitScopedKey(ScopedKey(%q, %q)) = %q, %q, %v", s1, k1, scope, key, ok)
		}
		if ok1 := len(k1) >= 1 && len(k1) <= idem.MaxClientKeyLen && utf8.ValidString(k1) && !strings.Contains(k1, "\x00"); ok1 {
			if err := idem.CheckKey(j1); err != nil {
				t.Fatalf("CheckKey(ScopedKey(%q, %q)) = %v", s1, k1, err)
			}
		}
		if idem.ValidScope(s2) && (s1 != s2 || k1 != k2) && j1 == j2 {
			t.Fatalf("ScopedKey(%q, %q) = ScopedKey(%q, %q) = %q", s1, k1, s2, k2, j1)
		}
	})
}
