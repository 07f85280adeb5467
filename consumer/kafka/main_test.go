package kafka_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"
)

// brokers are the seed brokers the tests use: IDEM_KAFKA_BROKERS (comma-separated host:port)
// for an external Kafka, or else an in-process kfake cluster, a Kafka-protocol broker that
// listens on 127.0.0.1 and that the client talks to over TCP like any other.
var brokers []string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if v := os.Getenv("IDEM_KAFKA_BROKERS"); v != "" {
		brokers = strings.Split(v, ",")
	} else {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			fmt.Fprintln(os.Stderr, "kfake:", err)
			return 1
		}
		brokers = c.ListenAddrs()
		defer c.Close()
	}
	cluster := goleak.IgnoreCurrent() // the broker's own goroutines
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(cluster); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}
