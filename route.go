package idem

import (
	"strings"
	"unicode/utf8"
)

// MaxRouteLen is the longest route a record carries, in bytes. A longer route is cut at a
// UTF-8 boundary.
const MaxRouteLen = 256

// cleanRoute returns route as a record carries it: valid UTF-8 without NUL bytes (each invalid
// byte and each NUL becomes U+FFFD), cut to at most MaxRouteLen bytes at a rune boundary.
// storekit.CleanRoute is the same function for stores; a test holds the two equal. Run
// applies it to Call.Route.
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
