package faultproxy_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem/internal/chaos/faultproxy"
)

// A proxy that loses every answer: the server acts, the client hears nothing.
func Example() {
	var charges atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges.Add(1)
		_, _ = io.WriteString(w, "charged")
	}))
	defer api.Close()

	p, err := faultproxy.New(faultproxy.Options{
		Target: strings.TrimPrefix(api.URL, "http://"),
		Faults: faultproxy.Faults{DropResponse: 1},
	})
	if err != nil {
		panic(err)
	}
	defer p.Close()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	_, err = (&http.Client{Transport: tr}).Post("http://"+p.Addr()+"/charge", "text/plain", strings.NewReader("{}"))
	fmt.Println("client got an error:", err != nil)
	fmt.Println("charges made:", charges.Load())
	fmt.Println("responses dropped:", p.Stats().DroppedResponses)
	// Output:
	// client got an error: true
	// charges made: 1
	// responses dropped: 1
}
