package idemfiber_test

import (
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemfiber"
	"github.com/idemkit/idem/store/memstore"
)

// The middleware on a route group: the second POST with the key is the first answer, replayed.
func Example() {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	scopeSecret := []byte("from your secret store, 32 bytes") // the same for every server of the store
	mw, err := idemfiber.New(idemfiber.Options{
		Runner: eng,
		Scope:  idemfiber.KeyedHeaderScope("X-API-Key", scopeSecret), // whose key it is
	})
	if err != nil {
		log.Fatal(err)
	}
	app := fiber.New()
	charges := 0
	app.Group("/v1", mw).Post("/charges", func(c *fiber.Ctx) error {
		charges++
		return c.Status(fiber.StatusCreated).JSON(fiber.Map{"charge": charges})
	})

	for range 2 {
		req := httptest.NewRequest("POST", "/v1/charges", strings.NewReader(`{"amount":1000}`))
		req.Header.Set("Idempotency-Key", "order-1001")
		req.Header.Set("X-API-Key", "sk_alice")
		resp, err := app.Test(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(body))
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201  {"charge":1}
	// 201 true {"charge":1}
	// charges: 1
}
