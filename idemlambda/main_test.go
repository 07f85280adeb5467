package idemlambda_test

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// sharedTransport carries the DynamoDB Local requests of every test, so its idle connections
// can be closed before the leak check.
var sharedTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 128
	t.MaxIdleConnsPerHost = 128
	return t
}()

func TestMain(m *testing.M) {
	if os.Getenv(sourceChildEnv) != "" {
		sourceChildMain() // a runtime process of source_runtime_test.go; never returns
	}
	if os.Getenv(childEnv) != "" {
		childMain() // a runtime process of runtime_test.go; never returns
	}
	code := m.Run()
	sharedTransport.CloseIdleConnections()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
