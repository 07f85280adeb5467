package storekit

import (
	"strings"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

// CleanRoute returns route as a record carries it: valid UTF-8 without NUL bytes (each invalid
// byte and each NUL becomes U+FFFD), cut to at most idem.MaxRouteLen bytes at a rune boundary.
// The engine applies the same rule to idem.Call.Route, so a store that cleans
// ReserveRequest.Route with it keeps a route given directly as the engine would have given it.
func CleanRoute(route string) string {
	if !utf8.ValidString(route) {
		route = strings.ToValidUTF8(route, "\uFFFD")
	}
	if strings.IndexByte(route, 0) >= 0 {
		route = strings.ReplaceAll(route, "\x00", "\uFFFD")
	}
	if len(route) <= idem.MaxRouteLen {
		return route
	}
	cut := idem.MaxRouteLen
	for cut > 0 && !utf8.RuneStart(route[cut]) {
		cut--
	}
	return route[:cut]
}
