package idem

import (
	"context"
	"strings"
	"unicode/utf8"
)

// MaxRouteLen is the longest route a record carries, in bytes. A longer route is cut at a
// UTF-8 boundary.
const MaxRouteLen = 256

// routeKey is the context key of the route set by WithRoute.
type routeKey struct{}

// WithRoute returns a copy of ctx that names the route on whose behalf Engine.Do (and DoJSON)
// claims a key: a label for operators, such as "POST /v1/orders/{id}/pay", stored in the
// record's Route when the key is claimed and shown by `idem list` and the operator console.
// It takes no part in the contract: the key and the fingerprint decide what is a duplicate,
// never the route.
//
// The route is made valid UTF-8 without NUL bytes (each invalid byte and each NUL becomes
// U+FFFD) and cut to at most MaxRouteLen bytes at a rune boundary. An empty route stores none.
// The engine gives it to the store as ReserveRequest.Route.
func WithRoute(ctx context.Context, route string) context.Context {
	return context.WithValue(ctx, routeKey{}, cleanRoute(route))
}

// cleanRoute returns route as a record carries it: valid UTF-8 without NUL bytes (each invalid
// byte and each NUL becomes U+FFFD), cut to at most MaxRouteLen bytes at a rune boundary.
// storekit.CleanRoute is the same function for stores; a test holds the two equal.
func cleanRoute(route string) string {
	if !utf8.ValidString(route) {
		route = strings.ToValidUTF8(route, "\uFFFD")
	}
	if strings.IndexByte(route, 0) >= 0 {
		route = strings.ReplaceAll(route, "\x00", "\uFFFD")
	}
	if len(route) <= MaxRouteLen {
		return route
	}
	cut := MaxRouteLen
	for cut > 0 && !utf8.RuneStart(route[cut]) {
		cut--
	}
	return route[:cut]
}

// routeFrom returns the route WithRoute set on ctx, or "".
func routeFrom(ctx context.Context) string {
	r, _ := ctx.Value(routeKey{}).(string)
	return r
}

// RouteFromContext returns the route WithRoute set on ctx, or "". A Runner other than the
// engine (a store's transaction runner) reads it to claim a key with its route, as the engine
// does.
func RouteFromContext(ctx context.Context) string { return routeFrom(ctx) }
