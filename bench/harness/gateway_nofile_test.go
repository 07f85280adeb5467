package harness

import "testing"

// fits counts one upstream socket per request and one client connection per streamsPerConn
// requests (h2c), under the soft limit less the proxy's own descriptors.
func TestFits(t *testing.T) {
	for _, c := range []struct {
		soft      uint64
		n, idle   int
		want      int
		whyWanted string
	}{
		{0, 10000, 10, 10000, "no limit known: everything"},
		{20000, 10000, 10, 10000, "10,000 + 40 connections fit in 20,000 - 10 - slack"},
		{10000, 10000, 10, 9918, "the most n with n + ceil(n/250) <= 10000 - 10 - 32"},
		{100, 10000, 90, 1, "never below one"},
	} {
		l := fdLimit{soft: c.soft}
		got := l.fits(c.n, c.idle)
		if got != c.want {
			t.Errorf("fits(%d, idle %d) under %d = %d, want %d (%s)", c.n, c.idle, c.soft, got, c.want, c.whyWanted)
		}
		if c.soft != 0 && got > 1 && uint64(fdsFor(got)+c.idle+fdSlack) > c.soft {
			t.Errorf("fits(%d) = %d needs %d descriptors, over %d", c.n, got, fdsFor(got)+c.idle+fdSlack, c.soft)
		}
	}
}
