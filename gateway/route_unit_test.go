package gateway

import (
	"net/http/httptest"
	"testing"
)

// lowerASCII lowers A to Z, both ends included, wherever the first upper-case letter is, and
// leaves every other byte alone.
func TestLowerASCII(t *testing.T) {
	for in, want := range map[string]string{
		"":           "",
		"/A":         "/a",
		"/Z":         "/z",
		"ABC":        "abc", // no byte below 'A' before the first letter (a host name)
		"/aZ":        "/az",
		"/AZ":        "/az",
		"/AzZ":       "/azz",
		"@[`{":       "@[`{", // the bytes just outside A-Z and a-z
		"/AZaz@[`{~": "/azaz@[`{~",
		"/ſ":         "/ſ", // no Unicode folding
	} {
		if got := lowerASCII(in); got != want {
			t.Errorf("lowerASCII(%q) = %q, want %q", in, got, want)
		}
	}
}

// canonicalPath roots a path that is empty or relative, and drops parameters from its first
// segment as from the others.
func TestCanonicalPathRoots(t *testing.T) {
	for in, want := range map[string]string{
		"":              "/",
		"/":             "/",
		"v1/charges":    "/v1/charges",
		";x/v1/charges": "/v1/charges",
		"/v1;x":         "/v1",
	} {
		if got := canonicalPath(in); got != want {
			t.Errorf("canonicalPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// An escape cut short at the end of the path is not an encoded slash or control character
// (and reading past the end must not panic); a space is not a control character.
func TestAmbiguousPathEdges(t *testing.T) {
	for _, p := range []string{"/x%1", "/x%", "/v1/%2", "/pay ments"} {
		if ambiguousPath(p) {
			t.Errorf("%q is ambiguous", p)
		}
	}
	for _, p := range []string{"/x%1f", "/x\x1f", "/x\x7f", "%2f"} {
		if !ambiguousPath(p) {
			t.Errorf("%q is not ambiguous", p)
		}
	}
}

// A record's route is the rule's method and path as configured, the request's method for a
// rule of any method, and the request's method and path for a rule without a path.
func TestRuleRoute(t *testing.T) {
	r := httptest.NewRequest("PATCH", "/v1/Orders/42/pay", nil)
	for _, tc := range []struct {
		rule Route
		want string
	}{
		{Route{}, "PATCH /v1/Orders/42/pay"},
		{Route{Method: "POST"}, "PATCH /v1/Orders/42/pay"},
		{Route{Path: "/v1/orders/{id}/pay"}, "PATCH /v1/orders/{id}/pay"},
		{Route{Method: "*", Path: "/v1/orders/*"}, "PATCH /v1/orders/*"},
		{Route{Method: "POST", Path: "/v1/orders/{id}/pay"}, "POST /v1/orders/{id}/pay"},
	} {
		if got := ruleRoute(tc.rule)(r); got != tc.want {
			t.Errorf("ruleRoute(%+v) = %q, want %q", tc.rule, got, tc.want)
		}
	}
}

// A rule's method is part of its match: empty and "*" match any method, any other only
// itself, case-sensitively.
func TestRouteMatchMethod(t *testing.T) {
	for _, tc := range []struct {
		rule, method string
		want         bool
	}{
		{"PATCH", "PATCH", true},
		{"PATCH", "POST", false},
		{"PATCH", "patch", false},
		{"", "POST", true},
		{"*", "POST", true},
		{"*", "PATCH", true},
	} {
		rt := route{rule: Route{Method: tc.rule, Path: "/v1/orders"}, pattern: "/v1/orders"}
		if got := rt.match(tc.method, "/v1/orders"); got != tc.want {
			t.Errorf("rule method %q, request %q: match = %v, want %v", tc.rule, tc.method, got, tc.want)
		}
		if rt.match(tc.method, "/v1/other") {
			t.Errorf("rule method %q, request %q: matched another path", tc.rule, tc.method)
		}
	}
}

// A rule's pattern is canonical but for its wildcards' names, kept as written.
func TestCanonicalPatternKeepsWildcardNames(t *testing.T) {
	for in, want := range map[string]string{
		"/V1/Orders/{Id}/pay": "/v1/orders/{Id}/pay",
		"/V1/{Id}/*":          "/v1/{Id}/*",
		"/*":                  "/*",
		// A segment the canonical form drops does not move a name onto another segment.
		"/;x/{Id}/pay":       "/{Id}/pay",
		"/a/../{Id}/{Ref}/x": "/{Id}/{Ref}/x",
		"/A/./{Id};v/B":      "/a/{id}/b",
	} {
		if got := canonicalPattern(in); got != want {
			t.Errorf("canonicalPattern(%q) = %q, want %q", in, got, want)
		}
	}
}

// A rule whose path has a segment the canonical form drops still matches the requests its
// canonical form names: "/;x/{Id}/pay" is the rule of /42/pay.
func TestRuleWithDroppedSegmentMatches(t *testing.T) {
	for _, p := range []string{"/;x/{Id}/pay", "/v1/./orders/{Id}/pay", "/v1/tmp/../orders/{Id}/pay"} {
		pat := canonicalPattern(p)
		rt := route{rule: Route{Method: "POST", Path: p}, pattern: pat}
		req := "/42/pay"
		if p != "/;x/{Id}/pay" {
			req = "/v1/orders/42/pay"
		}
		if !rt.match("POST", canonicalPath(req)) {
			t.Errorf("rule %q (pattern %q) does not match %s", p, pat, req)
		}
	}
}
