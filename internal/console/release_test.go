package console_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
)

// TestReleaseAnswers: what Release tells the operator. A token of 0 is refused as no claim
// confirmed (not as a changed record); a completed record without force is refused naming its
// status; with force it is deleted, and the answer says so.
func TestReleaseAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	b.completed(t, "t|done", idem.Response{Status: 201, Body: []byte("ok")})
	rec, err := b.st.Get(ctx, "t|done")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := console.Release(ctx, b.st, "t|done", 0, true, time.Now()); !errors.Is(err, console.ErrRefused) ||
		!strings.Contains(err.Error(), "no claim was confirmed") {
		t.Errorf("Release with token 0: %v, want ErrRefused: no claim was confirmed", err)
	}
	if _, err := console.Release(ctx, b.st, "t|done", rec.Token, false, time.Now()); !errors.Is(err, console.ErrRefused) ||
		!strings.Contains(err.Error(), "(status 201)") {
		t.Errorf("Release of a completed record without force: %v, want ErrRefused naming status 201", err)
	}
	msg, err := console.Release(ctx, b.st, "t|done", rec.Token, true, time.Now())
	if err != nil || !strings.HasPrefix(msg, "deleted the completed record") {
		t.Errorf("forced Release of a completed record: %q, %v; want it deleted", msg, err)
	}
	if _, err := b.st.Get(ctx, "t|done"); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("after a forced Release, Get: %v, want idem.ErrNotFound", err)
	}
}

// TestReleaseLogNamesThePeer: the log line of a release through the console names the
// operator's address without its port.
func TestReleaseLogNamesThePeer(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := b.client(t)
	b.stale(t, "t|peer")
	if code, body := c.post("/release", c.releaseForm("t|peer"), nil); code != http.StatusOK {
		t.Fatalf("release: %d\n%s", code, body)
	}
	if logs := b.logs.String(); !strings.Contains(logs, "remote=127.0.0.1 ") {
		t.Fatalf("release log does not name the peer 127.0.0.1 without its port:\n%s", logs)
	}
}
