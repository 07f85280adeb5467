package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
)

// sessionCookie names the cookie that carries a browser's session: a random identifier whose
// HMAC is the session's CSRF token.
const sessionCookie = "idem_console_session"

// equal compares a and b in constant time, their lengths included (both are hashed first).
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// matches reports whether the secret a request presented is the configured one, in constant
// time. An empty secret never matches, so a credential that is not configured (empty) opens
// nothing, whatever the request sends.
func matches(given, want string) bool {
	ok := equal(given, want)
	return given != "" && ok
}

// authenticate returns who sent r ("token", or "user NAME") if its credentials are the
// console's, or "" if not. A token is accepted as a bearer token, or as the password of basic
// credentials with any user name (which a browser can send by itself). An empty token or
// password is never accepted.
func (c *Console) authenticate(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
		if matches(strings.TrimSpace(tok), c.opt.Token) {
			return "token"
		}
		return ""
	}
	user, pass, ok := r.BasicAuth()
	if !ok {
		return ""
	}
	if matches(pass, c.opt.Token) {
		return "token"
	}
	if c.opt.User != "" {
		userOK := equal(user, c.opt.User)
		passOK := matches(pass, c.opt.Password)
		if userOK && passOK {
			return "user " + user
		}
	}
	return ""
}

// remoteAddr is the peer's address without its port.
func remoteAddr(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// session returns the session of r, setting a new session cookie on w when it has none.
func (c *Console) session(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(sessionCookie); err == nil && validSession(ck.Value) {
		return ck.Value
	}
	var b [32]byte
	_, _ = rand.Read(b[:])                     // never fails (crypto/rand)
	id := sessionEncoding.EncodeToString(b[:]) // 256 random bits, sessionLen characters
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	return id
}

// sessionLen is the length of a session identifier: 32 random bytes in sessionEncoding.
const sessionLen = 52

// sessionEncoding writes session identifiers: base32 (A-Z, 2-7) without padding.
var sessionEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// validSession reports whether v has the shape of a session identifier the console makes:
// sessionLen characters of the base32 alphabet. A shorter or malformed cookie (one set by
// someone else, or truncated) is not a session: the console starts a new one.
func validSession(v string) bool {
	if len(v) != sessionLen {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 'A' || c > 'Z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// csrfToken is the CSRF token of a session: its HMAC under the console's own key, which is
// new for each process.
func (c *Console) csrfToken(session string) string {
	m := hmac.New(sha256.New, c.key[:])
	m.Write([]byte(session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether a POST carries its session's CSRF token and, when the browser says
// where it comes from (Sec-Fetch-Site, Origin), comes from the console's own pages.
func (c *Console) checkCSRF(r *http.Request) bool {
	if c.cross.Check(r) != nil {
		return false
	}
	ck, err := r.Cookie(sessionCookie)
	if err != nil || !validSession(ck.Value) {
		return false
	}
	return equal(r.PostFormValue("csrf"), c.csrfToken(ck.Value))
}

// securityHeaders sets the headers every answer carries: no framing, no sniffing, no inline
// script or style, nothing cached, no referrer.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}
