package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/examples/internal/runmain"
)

// The demo as `go run ./examples/flaky-payments` runs it: the first answer is lost, the client
// retries with the same key, gets the original charge replayed, and the card is charged once.
func TestChargedOnce(t *testing.T) {
	out := runmain.Run(t, time.Minute, main)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []*regexp.Regexp{
		regexp.MustCompile(`^network: the server answered 201 Created but the answer is lost$`),
		regexp.MustCompile(`^client: attempt 1 failed \(.+\); retrying with the same key \S+$`),
		regexp.MustCompile(`^client: 201 Created \{"charge":"ch_1","amount":1000\} \(replayed: true\)$`),
		regexp.MustCompile(`^the card was charged 1 time\(s\)$`),
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d: %s\nwant a match of %s", i+1, lines[i], re)
		}
	}
}
