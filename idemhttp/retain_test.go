package idemhttp_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/storekit"
)

// retainSetup is a middleware that retains requests (opt), in front of a handler that holds
// its answer until release is closed, so that tests read the record while it is in flight.
func retainSetup(t *testing.T, opt idemhttp.Options) (*bundle, chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	opt.RetainRequest = true
	opt.Scope = idemhttp.KeyedHeaderScope("X-Tenant", []byte("0123456789abcdef0123456789abcdef"))
	b := setup(t, memstore.New(), idem.Options{}, opt, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(http.StatusCreated)
	}))
	// A test that fails before it releases the handler must not leave it blocked: the
	// server's close would wait for it until the test binary's timeout.
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return b, release
}

// post sends a POST with the given headers and body, and returns at once with a wait for its
// answer.
func post(t *testing.T, b *bundle, target string, h http.Header, body string) func() {
	t.Helper()
	req, err := http.NewRequest("POST", b.srv.URL+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	var wg sync.WaitGroup
	wg.Go(func() {
		resp, err := b.srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
	})
	return wg.Wait
}

// onlyRecord waits until the store holds one record, and returns it.
func onlyRecord(t *testing.T, st idem.Store) idem.Record {
	t.Helper()
	lister := st.(idem.Lister)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		page, err := lister.List(context.Background(), idem.ListQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Records) == 1 {
			rec, err := st.Get(context.Background(), page.Records[0].Key)
			if err != nil {
				t.Fatal(err)
			}
			return rec
		}
	}
	t.Fatal("no record claimed")
	return idem.Record{}
}

// TestRetainRequest: with RetainRequest, the record a key claims keeps the request while the
// handler still runs (an operator investigating a held claim sees it): method, path and query,
// headers and body, with every credential's value redacted — Authorization, Cookie, the scope
// header named in RedactHeaders, the key header, any name CredentialHeader matches, and
// credential query parameters. (Planted: the credential filter removed → the Authorization,
// cookie and api_key values reach the store and this fails.)
func TestRetainRequest(t *testing.T) {
	t.Parallel()
	b, release := retainSetup(t, idemhttp.Options{RedactHeaders: []string{"X-Tenant"}})
	h := http.Header{
		"Idempotency-Key": {"k1"}, "Authorization": {"Bearer s3cr3t-token"}, "Cookie": {"sid=c00kie"},
		"X-Tenant": {"tenant-credential"}, "X-Api-Key": {"ak-123"}, "Content-Type": {"application/json"},
		"X-Request-Id": {"r-1", "r-2"},
	}
	wait := post(t, b, "/v1/orders?currency=eur&api_key=qs-secret", h, `{"amount":100}`)
	rec := onlyRecord(t, b.store)
	if rec.State != idem.StateInProgress {
		t.Fatalf("record %+v, want it read in flight", rec)
	}
	got := rec.Request
	if got == nil {
		t.Fatal("no request retained")
	}
	if got.Method != "POST" || got.Target != "/v1/orders?currency=eur&api_key="+idemhttp.RedactedValue ||
		string(got.Body) != `{"amount":100}` || got.BodySize != 14 || got.Truncated {
		t.Errorf("retained %+v", got)
	}
	for name, want := range map[string]string{"Content-Type": "application/json", "Authorization": idemhttp.RedactedValue,
		"Cookie": idemhttp.RedactedValue, "X-Tenant": idemhttp.RedactedValue, "X-Api-Key": idemhttp.RedactedValue,
		"Idempotency-Key": idemhttp.RedactedValue} {
		if v := got.Header[name]; len(v) != 1 || v[0] != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
	if v := got.Header["X-Request-Id"]; len(v) != 2 || v[0] != "r-1" || v[1] != "r-2" {
		t.Errorf("X-Request-Id = %q, want both values", v)
	}
	enc := string(storekit.EncodeRequest(*got))
	for _, secret := range []string{"s3cr3t-token", "c00kie", "tenant-credential", "ak-123", "qs-secret"} {
		if strings.Contains(enc, secret) {
			t.Errorf("the stored request holds the credential %q", secret)
		}
	}
	close(release)
	wait()
	if rec, err := b.store.Get(context.Background(), rec.Key); err != nil || !rec.Request.Equal(got) || rec.State != idem.StateCompleted {
		t.Errorf("after completion: %+v, %v; want the same request kept", rec, err)
	}
}

// TestRetainRequestBound: whatever a client sends — a large body, many large headers, a long
// path — the retained request takes at most MaxRetainedRequest bytes as stored, keeps the
// body's first bytes and says how large the body was. (Planted: the bound not applied → this
// fails with the whole request stored.)
func TestRetainRequestBound(t *testing.T) {
	t.Parallel()
	const bound = 1024
	b, release := retainSetup(t, idemhttp.Options{MaxRetainedRequest: bound})
	h := http.Header{"Idempotency-Key": {"k2"}, "Content-Type": {"text/plain"}}
	for i := range 40 {
		h.Set("X-Pad-"+strings.Repeat("p", i), strings.Repeat("v", 200))
	}
	body := "first bytes " + strings.Repeat("z", 100_000)
	wait := post(t, b, "/"+strings.Repeat("long/", 100), h, body)
	rec := onlyRecord(t, b.store)
	close(release)
	wait()
	got := rec.Request
	if got == nil {
		t.Fatal("no request retained")
	}
	if n := len(storekit.EncodeRequest(*got)); n > bound {
		t.Errorf("retained %d bytes, bound %d", n, bound)
	}
	if !got.Truncated || got.BodySize != int64(len(body)) || got.Method != "POST" {
		t.Errorf("retained %s, truncated %v, body size %d: want truncated, body size %d", got.Method, got.Truncated, got.BodySize, len(body))
	}

	// A small request, whole.
	b2, release2 := retainSetup(t, idemhttp.Options{MaxRetainedRequest: bound})
	close(release2)
	post(t, b2, "/small", http.Header{"Idempotency-Key": {"k3"}}, "tiny")()
	rec = onlyRecord(t, b2.store)
	if rec.Request == nil || rec.Request.Truncated || !bytes.Equal(rec.Request.Body, []byte("tiny")) {
		t.Errorf("small request retained as %+v", rec.Request)
	}
}

// TestRetainRequestOffByDefault: without RetainRequest no request is kept.
func TestRetainRequestOffByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t, memstore.New(), idem.Options{}, idemhttp.Options{Scope: idemhttp.SingleCaller()},
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) }))
	post(t, b, "/x", http.Header{"Idempotency-Key": {"k"}}, "body")()
	if rec := onlyRecord(t, b.store); rec.Request != nil {
		t.Errorf("request kept without RetainRequest: %+v", rec.Request)
	}
}

func TestCredentialHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"Authorization": true, "proxy-authorization": true, "Cookie": true, "X-API-Key": true, "Idempotency-Key": true,
		"X-Auth-Token": true, "X-Hub-Signature-256": true, "X-Session": true, "api_key": true, "password": true,
		"Content-Type": false, "X-Request-Id": false, "Accept": false, "User-Agent": false,
	} {
		if got := idemhttp.CredentialHeader(name); got != want {
			t.Errorf("CredentialHeader(%q) = %v, want %v", name, got, want)
		}
	}
}
