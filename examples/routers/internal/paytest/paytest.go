// Package paytest checks a router example's payments API the same way for every router: a
// retry replays the first answer byte for byte and charges once, another body under the key is
// refused (422), another tenant's key is apart, and an invalid key is refused (400).
package paytest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// Run serves h and checks its POST /v1/charges; charges returns how many charges the API made.
func Run(t *testing.T, h http.Handler, charges func() int64) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(body string, hdr ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}

	alice := []string{"Authorization", "Bearer sk_alice", "Idempotency-Key", "a1"}
	r1, b1 := post(`{"amount":1000}`, alice...)
	r2, b2 := post(`{"amount":1000}`, alice...)
	if r1.StatusCode != http.StatusCreated || r1.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d replayed=%q %s", r1.StatusCode, r1.Header.Get("Idempotent-Replayed"), b1)
	}
	if r2.StatusCode != r1.StatusCode || string(b2) != string(b1) || r2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d replayed=%q %s, want a replay of %s", r2.StatusCode, r2.Header.Get("Idempotent-Replayed"), b2, b1)
	}
	if n := charges(); n != 1 {
		t.Fatalf("charges = %d after a retry, want 1", n)
	}
	if r3, b3 := post(`{"amount":9999}`, alice...); r3.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another body: %d %s, want 422", r3.StatusCode, b3)
	}
	if r4, _ := post(`{"amount":1000}`, "Authorization", "Bearer sk_bob", "Idempotency-Key", "a1"); r4.StatusCode != http.StatusCreated || charges() != 2 {
		t.Fatalf("another tenant: %d, charges %d", r4.StatusCode, charges())
	}
	// A key longer than 255 characters is refused.
	if r5, _ := post(`{"amount":1000}`, "Idempotency-Key", strings.Repeat("k", 256)); r5.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad key: %d, want 400", r5.StatusCode)
	}
}
