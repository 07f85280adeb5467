package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/syncbuf"
)

// TestLogBuffer: info lines wait (at most the flush interval), a warning is written at once
// with the lines before it, and stopping writes the rest.
func TestLogBuffer(t *testing.T) {
	t.Parallel()
	out := &syncbuf.Buffer{}
	buf := newLogBuffer(out)
	log := newLogger(buf, "text", "info")
	log = slog.New(flushHandler{log.Handler(), buf}).With("component", "test")

	log.Info("first")
	if s := out.String(); s != "" {
		t.Fatalf("an info line was written at once: %q", s)
	}
	log.Warn("second")
	if s := out.String(); !strings.Contains(s, "msg=first") || !strings.Contains(s, "msg=second") || !strings.Contains(s, "component=test") {
		t.Fatalf("a warning did not write itself and what preceded it: %q", s)
	}

	stop := buf.start()
	log.Info("third")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "msg=third") {
		if time.Now().After(deadline) {
			t.Fatalf("an info line was not flushed within 5s (interval %s)", logFlushEvery)
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.Info("fourth")
	stop()
	if s := out.String(); !strings.Contains(s, "msg=fourth") {
		t.Fatalf("stop did not flush: %q", s)
	}
}

// A JSON log writes durations as text ("1.5s"), as the text log does, not as nanoseconds.
func TestJSONLogDurations(t *testing.T) {
	var b bytes.Buffer
	newLogger(&b, "json", "info").Info("x", "lease_left", 1500*time.Millisecond, "group", slog.GroupValue(slog.Duration("after", 2*time.Second)))
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, b.Bytes())
	}
	if rec["lease_left"] != "1.5s" {
		t.Errorf("lease_left = %#v, want \"1.5s\"", rec["lease_left"])
	}
	if g, _ := rec["group"].(map[string]any); g == nil || g["after"] != "2s" {
		t.Errorf("group = %#v, want after \"2s\" inside it", rec["group"])
	}
}
