package main

import (
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/examples/internal/runmain"
)

// The demo as `go run ./examples/stdmux` runs it: the retry is a replay of the first answer, the
// other body is refused, and one order is created.
func TestDemo(t *testing.T) {
	out := runmain.Run(t, time.Minute, main)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), out)
	}
	first := `201 Created  replayed=""  {"order":1,"request":{"sku":"tea"}}`
	if lines[0] != first {
		t.Errorf("first POST:\n%s\nwant\n%s", lines[0], first)
	}
	if retry := `201 Created  replayed="true"  {"order":1,"request":{"sku":"tea"}}`; lines[1] != retry {
		t.Errorf("retry:\n%s\nwant\n%s", lines[1], retry)
	}
	if !strings.HasPrefix(lines[2], `422 Unprocessable Entity  replayed=""`) {
		t.Errorf("another body with the same key: %s, want a 422", lines[2])
	}
	if lines[3] != "orders created: 1" {
		t.Errorf("%s, want orders created: 1", lines[3])
	}
}
