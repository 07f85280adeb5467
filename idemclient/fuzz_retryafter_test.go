package idemclient

import (
	"strconv"
	"testing"
	"time"
)

// FuzzRetryAfter feeds Retry-After values, as any server may send, to the client's parser. It
// must not panic; an accepted value is never a negative pause; whole seconds come back exactly.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "1", "120", " 3 ", "-1", "1.5", "99999999999999999999",
		"Wed, 21 Oct 2015 07:28:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "Monday, 01-Jan-01 00:00:00 GMT", "", "soon"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := retryAfter(v, now)
		if !ok {
			if d != 0 {
				t.Fatalf("refused %q with a pause %s", v, d)
			}
			return
		}
		if d < 0 {
			t.Fatalf("%q gave a negative pause %s", v, d)
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && n <= 1<<30 && d != time.Duration(n)*time.Second {
			t.Fatalf("%q gave %s, want %ds", v, d, n)
		}
	})
}
