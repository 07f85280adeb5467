package gateway

import "strings"

// match reports whether the rule's method and path pattern match a request.
func (r *Route) match(method, path string) bool {
	if r.Method != "" && r.Method != "*" && !strings.EqualFold(r.Method, method) {
		return false
	}
	return matchPath(r.Path, path)
}

// matchPath matches an exact path, a prefix pattern ending in "/*", or a pattern with
// single-segment wildcards "{name}".
func matchPath(pattern, path string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/*"); ok {
		if path == prefix {
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
