package gateway

import (
	"strconv"
	"testing"
)

// FuzzParseByteSize feeds size strings (--max-body, IDEM_MAX_BODY, max_body: in a config file)
// to the parser. It must not panic; an accepted size is between 0 and 1 TiB; a plain number of
// bytes comes back as itself.
func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"1048576", "1MiB", "512KiB", "1MB", "10kB", " 2 GiB ", "0B", "-1", "1.5MiB",
		"1099511627776", "1099511627777", "1TiB", "9223372036854775807GiB", "MiB", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseByteSize(s)
		if err != nil {
			if n != 0 {
				t.Fatalf("%q refused with %d", s, n)
			}
			return
		}
		if n < 0 || n > 1<<40 {
			t.Fatalf("%q accepted as %d, outside [0, 1TiB]", s, n)
		}
		if m, err := strconv.ParseInt(s, 10, 64); err == nil && m != n {
			t.Fatalf("%q gave %d", s, n)
		}
	})
}
