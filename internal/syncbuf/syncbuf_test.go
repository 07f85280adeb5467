package syncbuf_test

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/syncbuf"
)

// Writers and a reader at once: every write arrives whole, and -race sees no race.
func TestConcurrentWritesAndReads(t *testing.T) {
	var b syncbuf.Buffer
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				fmt.Fprintf(&b, "g%d-%d\n", g, i)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 8*200 {
		t.Fatalf("%d lines, want %d", len(lines), 8*200)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	if len(seen) != 8*200 {
		t.Errorf("%d distinct lines, want %d: writes were torn or lost", len(seen), 8*200)
	}
}

func ExampleBuffer() {
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	log.Info("started", "port", 8080)
	fmt.Print(logs.String())
	// Output: level=INFO msg=started port=8080
}
