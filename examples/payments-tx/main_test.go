package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/internal/testenv"
)

func TestTwoPostsOneRow(t *testing.T) {
	ctx := context.Background()
	db, err := pgxpool.New(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	orders, records := "example_orders_"+suffix, "example_idem_"+suffix
	t.Cleanup(func() {
		for _, name := range []string{orders, records} {
			_, _ = db.Exec(context.Background(), `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize())
		}
	})
	a, h, err := setup(ctx, db, orders, records)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk_test")
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	r1, b1 := post(`{"customer":"c1","amount":4200}`)
	r2, b2 := post(`{"customer":"c1","amount":4200}`)
	if r1.StatusCode != http.StatusCreated || r1.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %s", r1.StatusCode, b1)
	}
	if r2.StatusCode != http.StatusCreated || r2.Header.Get("Idempotent-Replayed") != "true" || b2 != b1 {
		t.Fatalf("second: %d %s, want the replay of %s", r2.StatusCode, b2, b1)
	}
	if n, err := a.count(ctx); err != nil || n != 1 {
		t.Fatalf("%d order rows (%v) after two POSTs with one key, want 1", n, err)
	}
	if r3, b3 := post(`{"customer":"c1","amount":9999}`); r3.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another body with the key: %d %s, want 422", r3.StatusCode, b3)
	}
}
