package cli

import (
	"net/url"
	"sort"
	"strings"
)

// redactedValue replaces a secret in a store URL shown in logs and errors.
const redactedValue = "xxxxx"

// secretParam reports whether a store URL's query parameter carries a secret: a password
// (password, sslpassword, passwd, pwd), a secret (aws_secret_access_key, secret, client_secret),
// a token (session_token, token) or a credential of another name.
func secretParam(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"password", "passwd", "pwd", "secret", "token", "credential", "apikey", "api_key", "auth"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// redact returns a store URL fit for logs: the password of its userinfo and the values of
// its secret query parameters (secretParam) replaced by xxxxx, by url.URL.Redacted and a
// rewrite of the query. A URL that net/url does not parse (mysql://u:p@tcp(h:3306)/db) is
// redacted by hand the same way.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return redactByHand(raw)
	}
	_, hasPassword := u.User.Password()
	q := u.Query()
	changed := false
	for name, vs := range q {
		if secretParam(name) {
			for i := range vs {
				vs[i] = redactedValue
			}
			changed = true
		}
	}
	if !changed && !hasPassword {
		return raw // nothing to hide; String would also drop the // of memory://
	}
	if changed {
		u.RawQuery = encodeQuery(q)
	}
	return u.Redacted()
}

// redactByHand redacts a URL that net/url does not parse: the text between the userinfo's
// colon and its @, and the values of secret query parameters.
func redactByHand(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return "(a store URL that does not parse)"
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if colon := strings.Index(rest[:at], ":"); colon >= 0 {
			rest = rest[:colon+1] + redactedValue + rest[at:]
		}
	}
	if hasQuery {
		params := strings.Split(query, "&")
		for i, kv := range params {
			name, _, _ := strings.Cut(kv, "=")
			if n, err := url.QueryUnescape(name); err != nil || secretParam(n) {
				params[i] = name + "=" + redactedValue
			}
		}
		rest += "?" + strings.Join(params, "&")
	}
	return scheme + "://" + rest
}

// encodeQuery is url.Values.Encode without escaping the x of a redacted value.
func encodeQuery(q url.Values) string {
	names := make([]string, 0, len(q))
	for n := range q {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		for _, v := range q[n] {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(url.QueryEscape(n) + "=" + url.QueryEscape(v))
		}
	}
	return b.String()
}

// secrets returns the secret parts of a store URL, as they may appear in an error: the
// userinfo password and the secret query parameters' values, raw and decoded.
func secrets(raw string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 3 { // shorter ones would blank out unrelated text
			out = append(out, s)
		}
	}
	rawQuery := ""
	if u, err := url.Parse(raw); err == nil {
		if p, ok := u.User.Password(); ok {
			add(p)
			add(url.QueryEscape(p))
		}
		rawQuery = u.RawQuery
	} else if _, rest, ok := strings.Cut(raw, "://"); ok {
		rest, rawQuery, _ = strings.Cut(rest, "?")
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if colon := strings.Index(rest[:at], ":"); colon >= 0 {
				add(rest[colon+1 : at])
				if d, err := url.PathUnescape(rest[colon+1 : at]); err == nil {
					add(d)
				}
			}
		}
	}
	for _, kv := range strings.Split(rawQuery, "&") {
		name, v, _ := strings.Cut(kv, "=")
		if n, err := url.QueryUnescape(name); err == nil && secretParam(n) {
			add(v)
			if d, err := url.QueryUnescape(v); err == nil {
				add(d)
			}
		}
	}
	// The longest first, so a secret that contains another is replaced whole.
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// redactError hides the secrets of the store URL raw in err's message; errors.Is and
// errors.As still see err.
func redactError(err error, raw string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	red := msg
	for _, s := range secrets(raw) {
		red = strings.ReplaceAll(red, s, redactedValue)
	}
	if red == msg {
		return err
	}
	return &redactedError{msg: red, err: err}
}

// redactedError is an error whose message had secrets removed.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
