package load_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/idemkit/idem/bench/load"
)

// A run of exactly 200 requests by 4 clients against a local server.
func ExampleRun() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()

	res, err := load.Run(context.Background(), load.Options{
		URL:      srv.URL,
		Mode:     load.NewKey,
		Clients:  4,
		Requests: 200,
		Duration: 10 * time.Second,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Requests, "requests,", res.Errors, "errors,", res.Status[200], "answered 200")
	fmt.Println("p50 <= p99:", res.Latency.Quantile(0.5) <= res.Latency.Quantile(0.99))
	// Output:
	// 200 requests, 0 errors, 200 answered 200
	// p50 <= p99: true
}
