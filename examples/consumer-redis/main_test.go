package main

import (
	"testing"
	"time"

	"github.com/idemkit/idem/examples/internal/runmain"
	"github.com/idemkit/idem/internal/testenv"
)

// The example as `go run ./examples/consumer-redis` runs it, on Redis: every order added three
// times to the stream is charged once, by two workers of one group. The example uses a fresh
// stream and key prefix per run, and deletes the stream and the charges when it ends.
func TestEveryOrderChargedOnce(t *testing.T) {
	addr := testenv.RedisAddr(t)
	if addr == "" {
		return
	}
	t.Setenv("IDEM_REDIS_ADDR", addr)
	out := runmain.Run(t, 2*time.Minute, main)
	if want := "30 entries: 10 orders charged, 20 duplicates skipped; 10 charges for 10 orders in Redis\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
}
