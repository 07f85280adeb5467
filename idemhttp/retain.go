package idemhttp

import (
	"bytes"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// DefaultMaxRetainedRequest is the default Options.MaxRetainedRequest: 4 KiB.
const DefaultMaxRetainedRequest = 4 << 10

// minRetainedRequest is the smallest Options.MaxRetainedRequest: room for a method and a short
// path.
const minRetainedRequest = 64

// RedactedValue replaces the value of a credential in a retained request (Options.RetainRequest):
// the header or query parameter stays, so an operator sees that the client sent one, but its
// value never reaches the store.
const RedactedValue = "[redacted]"

// credentialNames are the exact header names that always carry credentials.
var credentialNames = map[string]bool{
	"authorization": true, "proxy-authorization": true, "cookie": true, "set-cookie": true,
	"www-authenticate": true, "proxy-authenticate": true,
}

// credentialParts are the parts of a name that mark it as a credential's.
var credentialParts = []string{"token", "secret", "passw", "pwd", "auth", "session", "key", "signature", "credential", "cookie"}

// CredentialHeader reports whether a header (or query parameter) of this name may carry a
// credential, whose value idem never shows or keeps: Authorization, Proxy-Authorization,
// Cookie, Set-Cookie, WWW-Authenticate, Proxy-Authenticate, and every name with token, secret,
// passw, pwd, auth, session, key, signature, credential or cookie in it, in any case (so
// X-API-Key and the Idempotency-Key are among them). It is the one rule for the request a
// record retains (Options.RetainRequest) and for the headers the operator console hides.
func CredentialHeader(name string) bool {
	n := strings.ToLower(name)
	if credentialNames[n] {
		return true
	}
	for _, s := range credentialParts {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// retained returns what a record keeps of r, whose body is body: its method, its path and
// query, its headers and its body, with the values of credentials (CredentialHeader and
// Options.RedactHeaders) replaced by RedactedValue, cut to Options.MaxRetainedRequest bytes as
// stored (storekit.FitRequest). It shares nothing with r or body.
func (m *middleware) retained(r *http.Request, body []byte) *idem.Request {
	req := idem.Request{Method: r.Method, Target: redactTarget(r.URL), BodySize: int64(len(body)), Body: body,
		Header: make(map[string][]string, len(r.Header))}
	for k, vs := range r.Header {
		if m.redacts(k) {
			req.Header[k] = []string{RedactedValue}
			continue
		}
		req.Header[k] = vs
	}
	kept := storekit.FitRequest(req, int(m.opt.MaxRetainedRequest))
	if kept != nil {
		kept.Body = bytes.Clone(kept.Body) // body is a pooled buffer, reused after the request
	}
	return kept
}

// redacts reports whether a header's value is kept as RedactedValue.
func (m *middleware) redacts(name string) bool {
	if CredentialHeader(name) {
		return true
	}
	for _, h := range m.opt.RedactHeaders {
		if strings.EqualFold(h, name) {
			return true
		}
	}
	return false
}

// redactTarget returns u's path and query as the client sent them, with the value of each
// query parameter whose name CredentialHeader matches replaced by RedactedValue. A query that
// does not parse is kept without its values.
func redactTarget(u *url.URL) string {
	target := u.EscapedPath()
	if u.RawQuery == "" {
		return target
	}
	parts := strings.Split(u.RawQuery, "&")
	for i, p := range parts {
		name, _, hasValue := strings.Cut(p, "=")
		n, err := url.QueryUnescape(name)
		if err != nil {
			parts[i] = name + "=" + RedactedValue
			continue
		}
		if hasValue && CredentialHeader(n) {
			parts[i] = name + "=" + RedactedValue
		}
	}
	return target + "?" + strings.Join(parts, "&")
}
