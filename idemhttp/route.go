package idemhttp

import (
	"net/http"
	"strings"
)

// RouteFunc names the route of a request: the label stored with the record its key claims
// (idem.Record.Route), which `idem list` and the operator console show. "" stores none.
type RouteFunc func(r *http.Request) string

// DefaultRoute is the default Options.Route: the pattern the http.ServeMux matched
// (r.Pattern, such as "POST /v1/orders/{id}/pay", with the request's method in front when the
// pattern names none), or, when no router set one (the middleware wraps the router instead of
// the handler it routes to), the method and the path ("POST /v1/orders/42/pay").
func DefaultRoute(r *http.Request) string {
	if p := r.Pattern; p != "" {
		if strings.IndexByte(p, ' ') < 0 {
			return r.Method + " " + p
		}
		return p
	}
	return r.Method + " " + r.URL.Path
}

// NoRoute is an Options.Route that stores no route.
func NoRoute(*http.Request) string { return "" }
