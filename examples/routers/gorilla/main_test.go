package main

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/examples/routers/internal/paytest"
	"github.com/idemkit/idem/store/memstore"
)

func TestRouter(t *testing.T) {
	eng, err := idem.New(memstore.New(), idem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var a api
	r, err := a.router(eng)
	if err != nil {
		t.Fatal(err)
	}
	paytest.Run(t, r, a.charges.Load)
}
