package main

import (
	"testing"
	"time"

	"github.com/idemkit/idem/examples/internal/runmain"
)

// The demo as `go run ./examples/grpc` runs it: the first answer is lost, the client interceptor
// retries with the same key, the server interceptor replays the stored reply, one charge.
func TestChargedOnce(t *testing.T) {
	out := runmain.Run(t, time.Minute, main)
	want := `network: the server answered "ch_1 for 1000", but the answer is lost
client: got "ch_1 for 1000" (replayed: [true])
charges made: 1
`
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}
