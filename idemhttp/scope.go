package idemhttp

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
)

// MaxScopeLen is the longest scope accepted, in bytes. A scope, its separator and a key of
// idem.MaxClientKeyLen fit in the engine's idem.MaxStorageKeyLen.
const MaxScopeLen = idem.MaxScopeLen

// ScopeSeparator separates the scope from the key in a storage key. Scopes must not contain it.
const ScopeSeparator = idem.ScopeSeparator

// ErrInvalidScope reports a scope that is longer than MaxScopeLen, not valid UTF-8, or that
// contains a control character or ScopeSeparator, or a ScopeFunc that failed. The middleware
// answers it with 400 (ProblemInvalidScope).
var ErrInvalidScope = errors.New("idemhttp: invalid scope")

// ErrScopeHeaderSpelling reports a request that carries the scope header spelled with
// underscores for hyphens (X_API_KEY for X-API-Key), or the other way round. Servers that
// follow CGI's naming (HTTP_X_API_KEY), such as many PHP, Python (WSGI) and Ruby (Rack)
// applications behind nginx or Apache, read both spellings as one header: a caller that
// sends only the other spelling would be anonymous to the scope and still known to the
// application, so the request is refused. Errors that match it also match ErrInvalidScope.
// The middleware answers it with 400 (ProblemScopeHeaderSpelling).
var ErrScopeHeaderSpelling = errors.New("idemhttp: scope header sent with another spelling")

// A ScopeFunc returns the tenant a request acts for: the principal whose keys it shares. Two
// requests with the same key and different scopes never see or block each other. It must
// return the same scope for every retry of a request, so a credential that rotates (a
// short-lived bearer token) is not a good scope: use the account behind it.
// "" is the anonymous scope, shared by every request that has none.
type ScopeFunc func(r *http.Request) (string, error)

// SingleCaller is the Options.Scope of an API that one trusted caller is the only one to use: a
// service of your own behind the middleware, never clients on the internet. Every request is
// in the one scope "", so keys are global: any caller who sends another's key and body
// receives the other's stored response. Choose it explicitly; with more than one caller, scope
// by the caller's identity instead (KeyedHeaderScope, or a ScopeFunc of your own).
func SingleCaller() ScopeFunc { return singleCaller }

func singleCaller(*http.Request) (string, error) { return "", nil }

// HeaderScope scopes requests by the value of the named header (such as X-API-Key or
// Authorization), hashed with SHA-256 so that the credential itself reaches neither the store
// nor the logs: the scope is the 64 hex digits of the hash. A request without the header is
// anonymous (scope ""). A request that sends the header more than once is refused
// (ErrInvalidScope: 400), since a handler behind the middleware may read another value than
// the scope was made of.
//
// An unkeyed hash of a guessable credential can be reversed by trying guesses: prefer
// KeyedHeaderScope, whose hash needs a secret kept apart from the store.
//
// A request that carries the header under another spelling that servers following CGI's
// naming read as the same header — underscores for hyphens, X_API_KEY for X-API-Key — is
// refused (ErrScopeHeaderSpelling: 400), with or without the header itself: the application
// behind may read that value while the scope would be made of the other, or of none.
func HeaderScope(name string) ScopeFunc {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, error) {
		v, err := scopeHeader(r.Header, name)
		if err != nil || v == nil {
			return "", err
		}
		return HashScope(*v), nil
	}
}

// scopeHeader returns the one value of the header name in h (nil without it), or an error
// wrapping ErrInvalidScope if the header is sent more than once or h carries another spelling
// of name (SameCGIHeader).
func scopeHeader(h http.Header, name string) (*string, error) {
	for k := range h {
		if k != name && SameCGIHeader(k, name) {
			return nil, fmt.Errorf("%w: %w: header %q is read as %s by servers that follow CGI's naming; send %s", ErrInvalidScope, ErrScopeHeaderSpelling, k, name, name)
		}
	}
	vs := h[name]
	switch len(vs) {
	case 0:
		return nil, nil
	case 1:
		return &vs[0], nil
	}
	return nil, fmt.Errorf("%w: header %s sent %d times", ErrInvalidScope, name, len(vs))
}

// SameCGIHeader reports whether header names a and b are one name to a server that follows
// CGI's naming (HTTP_ + the name in upper case with "-" turned to "_"): X_API_KEY and
// X-Api-Key are, X-API-Key and X-API-Keys are not. A middleware that scopes requests by a
// header refuses a request that carries another spelling of it (ErrScopeHeaderSpelling); a
// middleware for another framework makes the same check with it.
func SameCGIHeader(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if cgiByte(a[i]) != cgiByte(b[i]) {
			return false
		}
	}
	return true
}

func cgiByte(c byte) byte {
	switch {
	case c == '-':
		return '_'
	case 'a' <= c && c <= 'z':
		return c - 'a' + 'A'
	}
	return c
}

// KeyedHeaderScope is HeaderScope with the value hashed by HMAC-SHA256 under secret
// (KeyedHashScope), and the same refusals (a header sent twice, or under another spelling
// such as X_API_KEY: ErrScopeHeaderSpelling): without the secret, stored and logged scopes cannot be tested against
// guesses of the credential. Every process that shares a store must use the same secret; a
// new secret makes every scope new, so records made under the old one are not found again.
// It panics if secret is empty.
func KeyedHeaderScope(name string, secret []byte) ScopeFunc {
	if len(secret) == 0 {
		panic("idemhttp: KeyedHeaderScope with an empty secret")
	}
	name = http.CanonicalHeaderKey(name)
	secret = bytes.Clone(secret)
	return func(r *http.Request) (string, error) {
		v, err := scopeHeader(r.Header, name)
		if err != nil || v == nil {
			return "", err
		}
		return KeyedHashScope(secret, *v), nil
	}
}

// KeyedHashScope returns the hex HMAC-SHA256 of value under secret: a scope that identifies a
// credential without revealing it, even to someone who can try guesses of it.
func KeyedHashScope(secret []byte, value string) string {
	m := hmac.New(sha256.New, secret)
	_, _ = io.WriteString(m, value)
	var sum [sha256.Size]byte
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], m.Sum(sum[:0]))
	return string(out[:])
}

// KeyedStorageKey returns the storage key under which a middleware scoped with
// KeyedHeaderScope(name, secret) keeps the record of a request whose scope header has the
// value scopeValue and whose idempotency key is key: StorageKey(KeyedHashScope(secret,
// scopeValue), key). It finds a record from what a client sent (its API key and its
// Idempotency-Key) while the store holds only the HMAC. A request sent without the scope header
// has the anonymous scope instead: StorageKey("", key).
//
// It fails with an error wrapping idem.ErrInvalidInput if secret is empty or key is not a key
// the middleware accepts (ValidKey).
func KeyedStorageKey(secret []byte, scopeValue, key string) (string, error) {
	if len(secret) == 0 {
		return "", fmt.Errorf("%w: idemhttp: the scope secret is empty: the scope of a header value is its HMAC under the gateway's secret", idem.ErrInvalidInput)
	}
	if !ValidKey(key) {
		return "", fmt.Errorf("%w: idemhttp: key %q is not 1 to %d printable ASCII characters", idem.ErrInvalidInput, key, idem.MaxClientKeyLen)
	}
	return StorageKey(KeyedHashScope(secret, scopeValue), key), nil
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
func ValidScope(scope string) bool { return idem.ValidScope(scope) }

// StorageKey returns the engine key for a client key in a scope: scope, ScopeSeparator, key.
// Because a scope cannot contain the separator, distinct (scope, key) pairs give distinct
// storage keys. The route is not part of it: as the IETF draft specifies, a key is unique per
// client, and the same key sent to another route is a fingerprint mismatch (422). Operators use
// it to find a record (`idem inspect`, `idem release`).
func StorageKey(scope, key string) string { return idem.ScopedKey(scope, key) }
