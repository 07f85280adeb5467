package idemfiber_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gofiber/fiber/v2"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemfiber"
	"github.com/idemkit/idem/store/memstore"
)

// A record carries its route: the method and the registered path when the middleware is one
// of the route's handlers, the method and the request's path in front of the router, or what
// Options.Route says, copied out of the request's buffers, which fasthttp reuses.
func TestRecordRoute(t *testing.T) {
	t.Parallel()
	inPlace := func(c *fiber.Ctx) string { return c.Path() } // a view of the request's buffer
	for _, tc := range []struct {
		name  string
		route func(c *fiber.Ctx) string
		use   bool // app.Use(mw) in front of the router, not on the route
		want  string
	}{
		{"OnTheRoute", nil, false, "POST /orders/:id"},
		{"InFront", nil, true, "POST /orders/7"},
		{"Given", inPlace, false, "/orders/7"},
		{"None", func(*fiber.Ctx) string { return "" }, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := memstore.New()
			eng, err := idem.New(st, idem.Options{})
			if err != nil {
				t.Fatal(err)
			}
			mw, err := idemfiber.New(idemfiber.Options{Runner: eng, Scope: idemfiber.SingleCaller(), Route: tc.route})
			if err != nil {
				t.Fatal(err)
			}
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			ok := func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusCreated) }
			if tc.use {
				app.Use(mw)
				app.Post("/orders/:id", ok)
			} else {
				app.Post("/orders/:id", mw, ok)
			}
			send := func(path, key string) {
				req := httptest.NewRequest("POST", path, strings.NewReader("{}"))
				req.Header.Set(idem.KeyHeader, key)
				resp, err := app.Test(req, -1)
				if err != nil || resp.StatusCode != fiber.StatusCreated {
					t.Fatalf("POST %s: %v, %v", path, resp, err)
				}
				resp.Body.Close()
			}
			send("/orders/7", "first")
			for i := range 20 { // other requests reuse the first one's buffers
				send(fmt.Sprintf("/orders/%c%d", 'a'+i, i), fmt.Sprint("other-", i))
			}
			page, err := st.List(context.Background(), idem.ListQuery{})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, rec := range page.Records {
				if strings.HasSuffix(rec.Key, "first") {
					found = true
					if rec.Route != tc.want {
						t.Errorf("record's route %q, want %q", rec.Route, tc.want)
					}
				}
			}
			if !found {
				t.Fatalf("no record for the first key among %d", len(page.Records))
			}
		})
	}
}
