package gateway

import (
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/idemkit/idem/idemhttp"
)

// ruleRoute names the route of the requests a rule matched, stored with their records for
// operators (idem.Record.Route): the rule's method and path as configured ("POST
// /v1/orders/{id}/pay"), the request's method for a rule of any method, and the request's
// method and path (idemhttp.DefaultRoute) for a rule without a path.
func ruleRoute(rule Route) idemhttp.RouteFunc {
	switch {
	case rule.Path == "":
		return idemhttp.DefaultRoute
	case rule.Method == "" || rule.Method == "*":
		return func(r *http.Request) string { return r.Method + " " + rule.Path }
	}
	fixed := rule.Method + " " + rule.Path
	return func(*http.Request) string { return fixed }
}

// Rules match the canonical form of a request's path, so that a variant an upstream may
// route to the same handler never slips past a rule (and loses its mode, scope, fingerprint
// and TTL). The canonical form of a path is:
//
//   - percent-decoded (as net/http gives it in URL.Path: %70 is p, %2F is /);
//   - without ";parameters" in its segments (/v1/payments;x is /v1/payments), which some
//     servers strip;
//   - cleaned (path.Clean: no empty segments, no "." or ".." segments);
//   - without a trailing slash (/v1/payments/ is /v1/payments);
//   - in ASCII lower case (/V1/Payments is /v1/payments), for upstreams that route without
//     regard to case.
//
// Rule paths are put in the same form. The request itself is forwarded and fingerprinted
// as it came: only the choice of its rule uses the canonical form. A processed request whose
// path the gateway cannot put in one form, because an upstream may read it either way (an
// encoded slash or backslash, %2F or %5C, a backslash, a control character), is refused with
// 400 (ProblemAmbiguousPath).
func canonicalPath(p string) string {
	if strings.IndexByte(p, ';') >= 0 {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			segs[i], _, _ = strings.Cut(s, ";")
		}
		p = strings.Join(segs, "/")
	}
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	p = path.Clean(p)
	if len(p) > 1 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return lowerASCII(p)
}

// lowerASCII lower-cases ASCII letters only (no Unicode case folding: ſ is not s).
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + ('a' - 'A')
				}
			}
			return string(b)
		}
	}
	return s
}

// ambiguousPath reports whether an escaped request path is one an upstream may split into
// segments differently from the gateway: it has an encoded slash or backslash, a backslash,
// or a control character.
func ambiguousPath(escaped string) bool {
	for i := 0; i < len(escaped); i++ {
		switch c := escaped[i]; {
		case c == '\\' || c < 0x20 || c == 0x7f:
			return true
		case c == '%' && i+2 < len(escaped):
			if h := escaped[i+1 : i+3]; strings.EqualFold(h, "2f") || strings.EqualFold(h, "5c") ||
				(escaped[i+1] <= '1') || strings.EqualFold(h, "7f") {
				return true // %2F, %5C, and encoded control characters %00-%1F, %7F
			}
		}
	}
	return false
}

// canonicalPattern puts a rule's path pattern in canonical form, keeping its "/*" suffix
// and its {name} wildcards (whose names are not lower-cased, as they match anything). Each
// wildcard goes through canonicalPath as a numbered stand-in, so that a segment the
// canonical form drops (";x", ".", "..") cannot shift a name onto another segment.
func canonicalPattern(p string) string {
	prefix, star := strings.CutSuffix(p, "/*")
	if star && prefix == "" {
		return "/*"
	}
	var names []string
	segs := strings.Split(prefix, "/")
	for i, s := range segs {
		if isWildcard(s) {
			segs[i] = "{" + strconv.Itoa(len(names)) + "}"
			names = append(names, s)
		}
	}
	segs = strings.Split(canonicalPath(strings.Join(segs, "/")), "/")
	for i, s := range segs {
		if isWildcard(s) {
			if n, err := strconv.Atoi(s[1 : len(s)-1]); err == nil && n < len(names) {
				segs[i] = names[n]
			}
		}
	}
	out := strings.Join(segs, "/")
	if star {
		return out + "/*"
	}
	return out
}

// isWildcard reports whether a pattern segment is a {name} wildcard.
func isWildcard(seg string) bool {
	return len(seg) >= 2 && seg[0] == '{' && seg[len(seg)-1] == '}'
}

// match reports whether the rule's method and path pattern match a request whose path is
// already canonical (canonicalPath). Methods are case-sensitive (RFC 9110 §9.1).
func (r *route) match(method, canonical string) bool {
	if m := r.rule.Method; m != "" && m != "*" && m != method {
		return false
	}
	return matchPath(r.pattern, canonical)
}

// matchPath matches an exact path, a prefix pattern ending in "/*", or a pattern with
// single-segment wildcards "{name}".
func matchPath(pattern, path string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/*"); ok {
		if prefix == "" || path == prefix {
			return true
		}
		if !strings.HasPrefix(path, prefix+"/") {
			return matchSegments(prefix, path, true)
		}
		return true
	}
	if !strings.Contains(pattern, "{") {
		return pattern == path
	}
	return matchSegments(pattern, path, false)
}

// matchSegments compares segment by segment; {x} matches any one non-empty segment. With
// prefix, path may have more segments than pattern.
func matchSegments(pattern, path string, prefix bool) bool {
	for {
		pseg, prest, pmore := strings.Cut(strings.TrimPrefix(pattern, "/"), "/")
		seg, rest, more := strings.Cut(strings.TrimPrefix(path, "/"), "/")
		wild := strings.HasPrefix(pseg, "{") && strings.HasSuffix(pseg, "}")
		if (wild && seg == "") || (!wild && pseg != seg) {
			return false
		}
		if !pmore {
			return !more || prefix
		}
		if !more {
			return false
		}
		pattern, path = "/"+prest, "/"+rest
	}
}
