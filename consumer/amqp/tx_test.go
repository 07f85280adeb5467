package amqp_test

import (
	"testing"

	"github.com/idemkit/idem/consumer/consumertest"
	"github.com/idemkit/idem/consumer/internal/pgtx"
)

// In transaction mode (pgstore.TxRunner, effect rows written in the claim's transaction) the
// adapter passes the consumer suite, and a delivery whose commit fails is not acked: it comes
// back and is processed once, when the commit can succeed.
func TestTransactionMode(t *testing.T) {
	t.Parallel()
	pgtx.Run(t, broker{}, consumertest.Options{Events: 100, CrashMessages: 400})
}
