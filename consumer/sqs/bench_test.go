package sqs_test

import (
	"testing"

	"github.com/idemkit/idem/consumer/consumertest"
)

// BenchmarkThroughput measures the Worker on fauxqs with and without idem, side by side in one
// run (see consumertest.Throughput and docs/bench/sqs.md):
//
//	go test -run '^$' -bench BenchmarkThroughput -benchtime 2000x -count 3 ./consumer/sqs/
func BenchmarkThroughput(b *testing.B) {
	consumertest.Throughput(b, broker{}, consumertest.BenchOptions{})
}
