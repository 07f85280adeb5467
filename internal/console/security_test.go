package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/store/memstore"
)

// TestAuthWithoutToken: a console configured with a user and password only (no token) lets
// in that user with that password, and nobody with an empty secret: an empty bearer token, and
// basic credentials with an empty password (with the configured user name, another one, or
// none) get 401. It kills an authenticate that compares an empty presented secret with the
// unset token (equal("", "") is true).
func TestAuthWithoutToken(t *testing.T) {
	t.Parallel()
	const user, pass = "ops", "a-strong-console-password"
	b := setup(t, func(o *console.Options) { o.Token, o.User, o.Password = "", user, pass })
	for _, auth := range []string{
		"Bearer", "Bearer ", "Bearer  ", "bearer \t",
		"Basic " + basic(user, ""), "Basic " + basic("", ""), "Basic " + basic("anyone", ""), "Basic " + basic("admin", ""),
		"Basic " + basic("", pass), "Basic " + basic("anyone", pass), "Bearer " + pass,
	} {
		for _, path := range []string{"/", "/api/rates"} {
			req, _ := http.NewRequest("GET", b.srv.URL+path, nil)
			req.Header.Set("Authorization", auth)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s with %q: %d, want 401", path, auth, resp.StatusCode)
			}
		}
	}
	// A server trims the space after "Bearer"; a handler mounted behind another front (or
	// called directly) may see it: the handler itself refuses an empty bearer token.
	for _, auth := range []string{"Bearer ", "Bearer  ", "Bearer \t", "Basic " + basic("anyone", "")} {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		b.srv.Config.Handler.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("the handler with %q: %d, want 401", auth, rec.Code)
		}
	}
	req, _ := http.NewRequest("GET", b.srv.URL+"/", nil)
	req.SetBasicAuth(user, pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the configured user and password: %d, want 200", resp.StatusCode)
	}
}

// TestAuthTokenOnlyRefusesEmptyPassword: a console with a token only lets nobody in with an
// empty password or an empty bearer token, whatever the user name.
func TestAuthTokenOnlyRefusesEmptyPassword(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, auth := range []string{"Bearer ", "Basic " + basic("admin", ""), "Basic " + basic("", "")} {
		req, _ := http.NewRequest("GET", b.srv.URL+"/", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("with %q: %d, want 401", auth, resp.StatusCode)
		}
	}
}

// TestNewRefusesWeakCredentials: New refuses a user without a password (the credentials that
// let `admin:` in), a password without a user, and a token or password that is short or made
// of few distinct characters, naming the field.
func TestNewRefusesWeakCredentials(t *testing.T) {
	t.Parallel()
	strong := "a-strong-console-password"
	for _, tc := range []struct {
		opt   console.Options
		field string
	}{
		{console.Options{Token: token, User: "admin"}, "Options.User"},
		{console.Options{Token: token, User: "admin", Password: "x"}, "Options.Password"},
		{console.Options{Token: token, Password: strong}, "Options.Password"},
		{console.Options{User: "admin", Password: "short-pass"}, "Options.Password"},
		{console.Options{User: "admin", Password: strings.Repeat("ab", 12)}, "Options.Password"},
		{console.Options{Token: "0123456789abcde"}, "Options.Token"},
		{console.Options{Token: strings.Repeat("a", 40)}, "Options.Token"},
		{console.Options{Token: "abcdabcdabcdabcdabcd"}, "Options.Token"},
	} {
		tc.opt.Store = memstore.New()
		_, err := console.New(tc.opt)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("New(token %q, user %q, password %q) = %v, want ErrInvalidInput naming %s", tc.opt.Token, tc.opt.User, tc.opt.Password, err, tc.field)
		}
	}
	for _, opt := range []console.Options{{Token: token}, {User: "admin", Password: strong}, {Token: token, User: "admin", Password: strong}} {
		opt.Store = memstore.New()
		c, err := console.New(opt)
		if err != nil {
			t.Errorf("New(token %q, user %q, password %q): %v", opt.Token, opt.User, opt.Password, err)
			continue
		}
		c.Close()
	}
}

// TestCheckSecret: the strength rule shared by the console and `idem admin`.
func TestCheckSecret(t *testing.T) {
	t.Parallel()
	for s, ok := range map[string]bool{
		"":                                 false,
		"x":                                false,
		"0123456789abcde":                  false, // 15 bytes
		"0123456789abcdef":                 true,
		strings.Repeat("a", 64):            false,
		"abcdefgabcdefgabcdefg":            false, // 7 distinct
		"abcdefghabcdefgh":                 true,  // 8 distinct
		"3f9c1e0b7a2d4c6e8f0a1b2c3d4e5f60": true,  // openssl rand -hex 16
	} {
		if err := console.CheckSecret(s); (err == nil) != ok {
			t.Errorf("CheckSecret(%q) = %v, want ok %t", s, err, ok)
		}
	}
}

// TestSessionCookieShape: a session cookie the console did not make — short, or of the right
// length but outside its alphabet — is not taken as a session: the console sets a new one,
// and a release posted with the old cookie and the page's form is refused.
func TestSessionCookieShape(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.stale(t, "t|cookie")
	for _, bad := range []string{"x", "short-session", strings.Repeat("A", 32), strings.Repeat("A", 40), strings.Repeat("a", 52), strings.Repeat("A", 51) + "1", strings.Repeat("A", 53)} {
		c := b.client(t)
		c.jar["idem_console_session"] = &http.Cookie{Name: "idem_console_session", Value: bad}
		form := c.releaseForm("t|cookie")
		got := c.jar["idem_console_session"].Value
		if got == bad || len(got) != 52 {
			t.Errorf("cookie %q: kept as the session (now %q), want a new 52-character one", bad, got)
		}
		c.jar["idem_console_session"] = &http.Cookie{Name: "idem_console_session", Value: bad}
		if code, body := c.post("/release", form, nil); code != http.StatusForbidden {
			t.Errorf("release with cookie %q: %d, want 403\n%s", bad, code, body)
		}
	}
	if rec, _ := b.st.Get(context.Background(), "t|cookie"); console.ConditionOf(rec, time.Now()) != console.Stale {
		t.Fatalf("a release with a forged session changed the record: %v", console.ConditionOf(rec, time.Now()))
	}
	// The console's own cookie is kept from page to page.
	c := b.client(t)
	c.releaseForm("t|cookie")
	first := c.jar["idem_console_session"].Value
	c.releaseForm("t|cookie")
	if c.jar["idem_console_session"].Value != first {
		t.Fatalf("the console's own session cookie was replaced")
	}
}

// TestReleaseNeedsTheTokenShown: the check that the record has not changed since it was shown
// is unconditional: a release posted with token 0, a negative token, or none is refused and
// changes nothing, even with force.
func TestReleaseNeedsTheTokenShown(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := b.client(t)
	b.stale(t, "t|tok")
	for _, tok := range []string{"0", "-1", "", "x"} {
		form := c.releaseForm("t|tok")
		form.Set("force", "yes")
		if tok == "" {
			form.Del("token")
		} else {
			form.Set("token", tok)
		}
		code, body := c.post("/release", form, nil)
		if code != http.StatusConflict && code != http.StatusBadRequest {
			t.Errorf("release with token %q: %d, want 409 or 400\n%s", tok, code, body)
		}
		if rec, _ := b.st.Get(context.Background(), "t|tok"); console.ConditionOf(rec, time.Now()) != console.Stale {
			t.Fatalf("release with token %q changed the record: %v", tok, console.ConditionOf(rec, time.Now()))
		}
	}
	if _, err := console.Release(context.Background(), b.st, "t|tok", 0, true, time.Now()); !errors.Is(err, console.ErrRefused) {
		t.Fatalf("Release with token 0: %v, want ErrRefused", err)
	}
	form := c.releaseForm("t|tok")
	if code, body := c.post("/release", form, nil); code != 200 {
		t.Fatalf("release with the token shown: %d\n%s", code, body)
	}
}
