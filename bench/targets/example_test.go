package targets_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/bench/targets"
)

// The idemhttp target runs the handler once per key and replays it after.
func ExampleIdemHandler() {
	h, err := targets.IdemHandler(1024)
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{"amount":1000}`))
		req.Header.Set("Idempotency-Key", "3f2b8c1e-0000-4000-8000-000000000001")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true", len(body) == len(targets.Body))
	}
	// Output:
	// 201 false true
	// 201 true true
}
