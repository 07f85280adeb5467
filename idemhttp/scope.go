package idemhttp

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"
)

// MaxScopeLen is the longest scope accepted, in bytes. A scope, its separator and a key of
// MaxKeyLen fit in the engine's idem.MaxKeyLen.
const MaxScopeLen = 200

// ScopeSeparator separates the scope from the key in a storage key. Scopes must not contain it.
const ScopeSeparator = '|'

// ErrInvalidScope reports a scope that is longer than MaxScopeLen, not valid UTF-8, or that
// contains a control character or ScopeSeparator, or a ScopeFunc that failed. The middleware
// answers it with 400 (ProblemInvalidScope).
var ErrInvalidScope = errors.New("idemhttp: invalid scope")

// A ScopeFunc returns the tenant a request acts for: the principal whose keys it shares. Two
// requests with the same key and different scopes never see or block each other (DESIGN.md,
// invariant 7). It must return the same scope for every retry of a request, so a credential
// that rotates (a short-lived bearer token) is not a good scope: use the account behind it.
// "" is the anonymous scope, shared by every request that has none.
type ScopeFunc func(r *http.Request) (string, error)

// HeaderScope scopes requests by the value of the named header (such as X-API-Key or
// Authorization), hashed with SHA-256 so that no secret reaches the store or the logs: the
// scope is the 64 hex digits of the hash. A request without the header is anonymous (scope "").
// If the header is sent more than once, the values are hashed together.
func HeaderScope(name string) ScopeFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		vs := r.Header[name]
		if len(vs) == 0 {
			return "", nil
		}
		return HashScope(vs...), nil
	}
}

// HashScope returns the hex SHA-256 of values (joined by newlines): a scope that identifies a
// credential without revealing it.
func HashScope(values ...string) string {
	var sum [sha256.Size]byte
	if len(values) == 1 {
		sum = sha256.Sum256([]byte(values[0]))
	} else {
		sum = sha256.Sum256([]byte(strings.Join(values, "\n")))
	}
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// ValidScope reports whether scope can prefix a storage key: at most MaxScopeLen bytes of
// UTF-8 without control characters or ScopeSeparator.
func ValidScope(scope string) bool {
	if len(scope) > MaxScopeLen {
		return false
	}
	for i := 0; i < len(scope); i++ {
		if c := scope[i]; c < 0x20 || c == 0x7f || c == ScopeSeparator {
			return false
		}
	}
	return utf8.ValidString(scope)
}

// StorageKey returns the engine key for a client key in a scope: scope, ScopeSeparator, key.
// Because a scope cannot contain the separator, distinct (scope, key) pairs give distinct
// storage keys. The route is not part of it: as the IETF draft specifies, a key is unique per
// client, and the same key sent to another route is a fingerprint mismatch (422). Operators use
// it to find a record (`idem inspect`, `idem release`).
func StorageKey(scope, key string) string {
	return scope + string(ScopeSeparator) + key
}
