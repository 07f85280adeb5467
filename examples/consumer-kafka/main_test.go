package main

import (
	"testing"
	"time"

	"github.com/idemkit/idem/examples/internal/runmain"
)

// The example as `go run ./examples/consumer-kafka` runs it, on its in-process kfake broker:
// every order published three times is charged once, by two workers of one consumer group.
func TestEveryOrderChargedOnce(t *testing.T) {
	t.Setenv("IDEM_KAFKA_BROKERS", "") // kfake, as a reader without Kafka runs it
	out := runmain.Run(t, 2*time.Minute, main)
	if want := "30 records: 10 orders charged, 20 duplicates skipped; 10 charges for 10 orders\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
}
