package idem

import (
	"strings"
	"unicode/utf8"
)

// ScopeSeparator separates the scope from the key in a scoped storage key (see ScopedKey).
// Scopes must not contain it; keys may.
const ScopeSeparator = '|'

// MaxScopeLen is the longest scope accepted, in bytes. A scope, ScopeSeparator and a client key
// of MaxClientKeyLen bytes fit in MaxStorageKeyLen.
const MaxScopeLen = 200

// CheckScope reports whether scope can prefix a storage key (see ScopedKey): at most MaxScopeLen
// bytes of UTF-8 without ScopeSeparator or an ASCII control character (below 0x20, or DEL).
// The empty scope is valid: it is the scope of callers that have none, shared by all of them.
// The error matches ErrInvalidInput and says what is wrong, without repeating the scope, which
// may be derived from a credential.
func CheckScope(scope string) error {
	if len(scope) > MaxScopeLen {
		return invalid("scope of %d bytes is longer than %d", len(scope), MaxScopeLen)
	}
	for i := 0; i < len(scope); i++ {
		switch c := scope[i]; {
		case c == ScopeSeparator:
			return invalid("scope contains the scope separator %q at byte %d", ScopeSeparator, i)
		case c < 0x20 || c == 0x7f:
			return invalid("scope contains the control character 0x%02x at byte %d", c, i)
		}
	}
	if !utf8.ValidString(scope) {
		return invalid("scope is not valid UTF-8")
	}
	return nil
}

// ValidScope reports whether CheckScope accepts scope.
func ValidScope(scope string) bool { return CheckScope(scope) == nil }

// ScopedKey returns the storage key of key in scope: scope, ScopeSeparator, key. Every face
// (the HTTP middleware and gateway, the consumers, the CLI and the console) joins scope and key
// this way, so one record is found by the same (scope, key) from any of them.
//
// The join is unambiguous when scope is valid (CheckScope): a valid scope never contains the
// separator, so the key splits at the first one (SplitScopedKey) and distinct (scope, key)
// pairs give distinct storage keys, whatever the key holds. Check the scope once, where it is
// configured or derived; ScopedKey itself does not. The empty scope still gets its separator
// ("|key"), so an unscoped key never looks like a scoped one.
//
// When scope is valid and key is 1 to MaxClientKeyLen bytes of UTF-8 without a NUL byte, the
// result passes CheckKey.
func ScopedKey(scope, key string) string {
	return scope + string(ScopeSeparator) + key
}

// SplitScopedKey splits a storage key made by ScopedKey into its scope and key, at the first
// ScopeSeparator. ok is false, and scope and key are empty, when s has no separator or the
// part before it is not a valid scope (CheckScope), so s was not made by ScopedKey.
func SplitScopedKey(s string) (scope, key string, ok bool) {
	scope, key, ok = strings.Cut(s, string(ScopeSeparator))
	if !ok || !ValidScope(scope) {
		return "", "", false
	}
	return scope, key, true
}
