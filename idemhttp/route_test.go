package idemhttp_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
)

// The record a request claims carries its route: the ServeMux pattern when the middleware
// wraps the routed handler (with the method in front when the pattern has none), the method
// and the path when it wraps the router, what Options.Route says, or none with NoRoute.
func TestRecordRoute(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
	inside := func(mw func(http.Handler) http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("POST /v1/orders/{id}/pay", mw(ok))
		mux.Handle("/v1/refunds/", mw(ok))
		return mux
	}
	outside := func(mw func(http.Handler) http.Handler) http.Handler {
		mux := http.NewServeMux()
		mux.Handle("POST /v1/orders/{id}/pay", ok)
		mux.Handle("/", ok)
		return mw(mux)
	}
	for _, tc := range []struct {
		name  string
		route idemhttp.RouteFunc
		mount func(func(http.Handler) http.Handler) http.Handler
		path  string
		want  string
	}{
		{"Pattern", nil, inside, "/v1/orders/42/pay", "POST /v1/orders/{id}/pay"},
		{"PatternWithoutMethod", nil, inside, "/v1/refunds/7", "POST /v1/refunds/"},
		{"MethodAndPath", nil, outside, "/v1/orders/42/pay", "POST /v1/orders/42/pay"},
		{"LongPath", nil, outside, "/" + strings.Repeat("a", 300), "POST /" + strings.Repeat("a", idem.MaxRouteLen-6)},
		{"Custom", func(*http.Request) string { return "charge" }, outside, "/v1/orders/42/pay", "charge"},
		{"None", idemhttp.NoRoute, inside, "/v1/orders/42/pay", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := memstore.New()
			eng, err := idem.New(st, idem.Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			mw, err := idemhttp.New(idemhttp.Options{Runner: eng, Route: tc.route, Logger: quiet, Scope: idemhttp.SingleCaller()})
			if err != nil {
				t.Fatal(err)
			}
			h := tc.mount(mw)
			for range 2 { // the replay leaves the route as the claim stored it
				req, _ := http.NewRequest("POST", "http://x"+tc.path, strings.NewReader("{}"))
				req.Header.Set("Idempotency-Key", "k1")
				rec := &recorder{header: http.Header{}}
				h.ServeHTTP(rec, req)
				if rec.status != 201 {
					t.Fatalf("status %d", rec.status)
				}
			}
			page, err := st.List(context.Background(), idem.ListQuery{})
			if err != nil || len(page.Records) != 1 {
				t.Fatalf("List = %+v, %v", page, err)
			}
			if got := page.Records[0].Route; got != tc.want {
				t.Errorf("route %q, want %q", got, tc.want)
			}
		})
	}
}

// recorder is the least http.ResponseWriter.
type recorder struct {
	header http.Header
	status int
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(200)
	return len(b), nil
}
