package console_test

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestPagesCountEveryAttempt: a key whose first two attempts failed and released it, then
// completed: the list and the record page show 3 attempts and the first claim's time.
func TestPagesCountEveryAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx, key := context.Background(), "t|pay-1"
	first := b.now.Add(-time.Minute)
	var tok int64
	for i := range 3 {
		res, err := b.st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: first.Add(time.Duration(i) * 10 * time.Second), Lease: time.Minute, TTL: time.Hour})
		if err != nil || !res.Claimed {
			t.Fatalf("attempt %d: %v %+v", i+1, err, res)
		}
		tok = res.Record.Token
		if i < 2 {
			if err := b.st.Release(ctx, key, tok); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.st.Complete(ctx, key, tok, idem.Response{Status: 201}, b.now, b.now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	c := b.client(t)
	_, page := c.get("/record?key=" + url.QueryEscape(key))
	if !regexp.MustCompile(`>Attempts</dt><dd>3</dd>`).MatchString(page) {
		t.Errorf("record page does not show 3 attempts:\n%s", page)
	}
	if want := "First claimed</dt><dd>" + first.UTC().Format(time.RFC3339) + " (1m0s ago)"; !strings.Contains(page, want) {
		t.Errorf("record page lacks %q:\n%s", want, page)
	}
	_, list := c.get("/")
	if !strings.Contains(list, `<td data-label="Attempts">3</td>`) {
		t.Errorf("list does not show 3 attempts:\n%s", list)
	}
}
