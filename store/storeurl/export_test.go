package storeurl

import "reflect"

// SameOpener reports whether schemes a and b are both registered and opened by the same
// function.
func SameOpener(a, b string) bool {
	mu.RLock()
	defer mu.RUnlock()
	fa, fb := openers[a], openers[b]
	return fa != nil && fb != nil && reflect.ValueOf(fa).Pointer() == reflect.ValueOf(fb).Pointer()
}
