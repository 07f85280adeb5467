package console_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/store/memstore"
)

// TestSessionCookieSecureOverTLS: the session cookie is Secure when the console is served
// over TLS, and not over plain HTTP (where a browser would drop a Secure cookie).
func TestSessionCookieSecureOverTLS(t *testing.T) {
	t.Parallel()
	c, err := console.New(console.Options{Store: memstore.New(), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct {
		url    string
		secure bool
	}{{"https://console.example/", true}, {"http://console.example/", false}} {
		r := httptest.NewRequest("GET", tc.url, nil)
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			t.Fatalf("%s: %d", tc.url, w.Code)
		}
		var found bool
		for _, ck := range w.Result().Cookies() {
			if ck.Name == "idem_console_session" {
				found = true
				if ck.Secure != tc.secure {
					t.Errorf("%s: session cookie Secure %v, want %v", tc.url, ck.Secure, tc.secure)
				}
			}
		}
		if !found {
			t.Errorf("%s: no session cookie set", tc.url)
		}
	}
}
