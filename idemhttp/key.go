package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
)

// ErrInvalidKey reports a key that is not 1 to idem.MaxClientKeyLen printable ASCII characters, a
// malformed structured-field string, a header sent more than once, or a key header sent under
// another spelling that CGI-style servers read as the same header (Idempotency_Key: see
// SameCGIHeader). The middleware answers it with 400 (ProblemInvalidKey).
var ErrInvalidKey = errors.New("idemhttp: invalid idempotency key")

// ParseKey parses an Idempotency-Key header value. It accepts a structured-field string
// (RFC 8941 §3.3.3: `"abc"`, with `\"` and `\\` as the only escapes), as the IETF draft
// specifies, and a bare value (`abc`), as Stripe's clients send it. A value that starts with a
// double quote is a structured-field string and must be a valid one, without parameters. A key
// is one string, never a list: a bare value with a comma (`k1, k2`, which is also what two
// header lines become when a proxy folds them into one) and a list of strings (`"k1", "k2"`)
// return ErrInvalidKey, as two header lines do (400). A comma inside a quoted string
// (`"k1,k2"`) is part of that one key.
// Leading and trailing spaces and tabs are ignored. The key, once unquoted, must be 1 to
// idem.MaxClientKeyLen printable ASCII characters (0x20 to 0x7E); anything else returns ErrInvalidKey.
// ParseKey does not allocate for a bare key or a quoted key without escapes.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if len(v) == 0 {
		return "", ErrInvalidKey
	}
	if v[0] != '"' {
		// A comma makes the value a list (k1, k2): two keys on one line, as a proxy folds two
		// header lines into one. Which one is meant is not ours to guess, as with two lines.
		if len(v) > idem.MaxClientKeyLen || !printable(v) || strings.IndexByte(v, ',') >= 0 {
			return "", ErrInvalidKey
		}
		return v, nil
	}
	// A structured-field string: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE.
	escaped := false
	end := -1
	for i := 1; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c > 0x7e {
			return "", ErrInvalidKey
		}
		if c == '\\' {
			if i+1 >= len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
				return "", ErrInvalidKey
			}
			escaped = true
			i++
			continue
		}
		if c == '"' {
			end = i
			break
		}
	}
	if end != len(v)-1 { // unterminated, or something (parameters) after the closing quote
		return "", ErrInvalidKey
	}
	k := v[1:end]
	if escaped {
		var b strings.Builder
		b.Grow(len(k))
		for i := 0; i < len(k); i++ {
			if k[i] == '\\' {
				i++
			}
			b.WriteByte(k[i])
		}
		k = b.String()
	}
	if len(k) == 0 || len(k) > idem.MaxClientKeyLen {
		return "", ErrInvalidKey
	}
	return k, nil
}

// ValidKey reports whether k is 1 to idem.MaxClientKeyLen printable ASCII characters: a key as the
// middleware uses it, whatever its source.
func ValidKey(k string) bool { return len(k) > 0 && len(k) <= idem.MaxClientKeyLen && printable(k) }

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// KeySource says where the middleware finds a request's key. The zero value reads the
// Idempotency-Key header with ParseKey.
//
// Webhook receivers use another source: senders retry deliveries but send no
// Idempotency-Key, so the key is the sender's event id, from a header (GitHub's
// X-GitHub-Delivery) or from the JSON body (a Stripe event's "id").
type KeySource struct {
	header string   // canonical header name; "" with path == nil and fn == nil: idem.KeyHeader
	path   []string // JSON body field, split at dots
	fn     func(r *http.Request, body []byte) (string, error)
}

// HeaderKey reads the key from the named header (parsed with ParseKey, so a quoted or a bare
// value is accepted).
func HeaderKey(name string) KeySource {
	return KeySource{header: http.CanonicalHeaderKey(name)}
}

// JSONKey reads the key from a field of the JSON request body: a top-level member ("id") or a
// dotted path into nested objects ("data.object.id"). The field must be a string or a number
// (taken as written); a body that is not JSON, or that lacks the field, has no key.
func JSONKey(path string) KeySource {
	return KeySource{path: strings.Split(path, ".")}
}

// FuncKey computes the key with fn, which gets the request and its body (already read and
// bounded by Options.MaxRequestBody; r.Body must not be read). fn returns "" for a request
// without a key, or an error for an invalid one (400). A non-empty key must satisfy ValidKey.
func FuncKey(fn func(r *http.Request, body []byte) (string, error)) KeySource {
	return KeySource{fn: fn}
}

// needsBody reports whether the key is only known once the body is read.
func (s *KeySource) needsBody() bool { return s.path != nil || s.fn != nil }

// String describes the source, for logs and errors.
func (s KeySource) String() string {
	switch {
	case s.fn != nil:
		return "func"
	case s.path != nil:
		return "json:" + strings.Join(s.path, ".")
	case s.header != "":
		return "header:" + s.header
	}
	return "header:" + idem.KeyHeader
}

func (s *KeySource) validate() error {
	if s.path != nil {
		for _, p := range s.path {
			if p == "" {
				return optionError("Options.Key", "JSON path %s has an empty segment", strings.Join(s.path, "."))
			}
		}
	}
	if s.header != "" && !validToken(s.header) {
		return optionError("Options.Key", "%q is not a header name", s.header)
	}
	return nil
}

// fromHeader returns the key from the request's header: "" when absent. A request that
// carries the header under another spelling that servers following CGI's naming read as the
// same header (Idempotency_Key) is refused: an application behind would read a key the
// middleware never saw, and take the request for one made safe to retry.
func (s *KeySource) fromHeader(h http.Header) (string, error) {
	name := s.header
	if name == "" {
		name = idem.KeyHeader
	}
	for k := range h {
		if k != name && SameCGIHeader(k, name) {
			return "", fmt.Errorf("%w: header %q is read as %s by servers that follow CGI's naming; send %s", ErrInvalidKey, k, name, name)
		}
	}
	vs := h[name]
	switch len(vs) {
	case 0:
		return "", nil
	case 1:
		return ParseKey(vs[0])
	}
	return "", ErrInvalidKey // sent twice: which one is meant is not ours to guess
}

// fromBody returns the key found by a JSON or function source: "" when absent.
func (s *KeySource) fromBody(r *http.Request, body []byte) (string, error) {
	if s.fn != nil {
		k, err := s.fn(r, body)
		if err != nil {
			return "", errors.Join(ErrInvalidKey, err)
		}
		if k != "" && !ValidKey(k) {
			return "", ErrInvalidKey
		}
		return k, nil
	}
	v, ok := lookupJSON(body, s.path)
	if !ok {
		return "", nil
	}
	if !ValidKey(v) {
		return "", ErrInvalidKey
	}
	return v, nil
}

// validToken reports whether s is an RFC 9110 token (a header name or a method).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || !tokenChar[c] {
			return false
		}
	}
	return true
}

var tokenChar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
