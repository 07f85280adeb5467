package dynamostore_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/dynamostore"
)

// TestLargeResponses: responses beyond one item are split into part items written in the same
// transaction as the completion; they replay byte for byte, are fenced like small ones, are
// replaced cleanly when the key is claimed again, and are swept and deleted with their record.
func TestLargeResponses(t *testing.T) {
	t.Parallel()
	b := setup(t, dynamostore.Options{SortKey: "sk", KeyPrefix: "big#"})
	st := b.store
	ctx := context.Background()
	fp := idem.Fingerprint([]byte("x"))
	now := time.Now()
	const lease, window = 10 * time.Second, time.Hour

	body := make([]byte, dynamostore.MaxResponseBytes-1024)
	for i := range body {
		body[i] = byte(i*31 + i>>11)
	}
	resp := idem.Response{Status: 200, Header: map[string][]string{"Content-Type": {"application/octet-stream"}}, Body: body}
	claim, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: lease, TTL: window})
	if err != nil || !claim.Claimed {
		t.Fatal(err, claim)
	}
	// A stale holder cannot complete (the transaction is cancelled as a whole).
	if err := st.Complete(ctx, "k", claim.Record.Token-1, resp, now, now.Add(window)); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("stale Complete with parts: %v, want ErrLeaseLost", err)
	}
	if _, err := st.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, "k", claim.Record.Token, resp, now, now.Add(window)); err != nil {
		t.Fatalf("Complete of %d bytes: %v", len(body), err)
	}
	for _, get := range []func() (idem.Record, error){
		func() (idem.Record, error) { return st.Get(ctx, "k") },
		func() (idem.Record, error) {
			r, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now.Add(time.Second), Lease: lease, TTL: window})
			return r.Record, err
		},
	} {
		rec, err := get()
		if err != nil || rec.Response == nil || !rec.Response.Equal(resp) {
			t.Fatalf("large response did not round-trip: %v", err)
		}
	}

	// Too large: refused, nothing changed.
	other, _ := st.Reserve(ctx, idem.ReserveRequest{Key: "k2", Fingerprint: fp, Now: now, Lease: lease, TTL: window})
	huge := idem.Response{Body: make([]byte, dynamostore.MaxResponseBytes)}
	if err := st.Complete(ctx, "k2", other.Record.Token, huge, now, now.Add(window)); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("Complete beyond MaxResponseBytes: %v, want ErrInvalidInput", err)
	}
	if rec, err := st.Get(ctx, "k2"); err != nil || rec.State != idem.StateInProgress {
		t.Fatalf("record after a refused Complete: %v %+v", err, rec)
	}

	// Expired and claimed again, then completed small: the old parts never leak in.
	later := now.Add(window)
	again, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: later, Lease: lease, TTL: window})
	if err != nil || !again.Claimed {
		t.Fatal(err, again)
	}
	small := idem.Response{Status: 201, Body: []byte("small")}
	if err := st.Complete(ctx, "k", again.Record.Token, small, later, later.Add(window)); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Get(ctx, "k"); err != nil || !rec.Response.Equal(small) {
		t.Fatalf("after reclaim: %v %+v", err, rec.Response)
	}
	// …and completed large again: the new parts replace the old ones.
	third, _ := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: later.Add(window), Lease: lease, TTL: window})
	body2 := bytes.Repeat([]byte("new"), dynamostore.PartSize)
	if err := st.Complete(ctx, "k", third.Record.Token, idem.Response{Status: 200, Body: body2}, later, later.Add(3*window)); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.Get(ctx, "k"); err != nil || !bytes.Equal(rec.Response.Body, body2) {
		t.Fatalf("after second large completion: %v", err)
	}

	// Sweep deletes the record with its parts, counting the record once.
	n, err := st.Sweep(ctx, later.Add(4*window), 100)
	if err != nil || n != 2 { // "k" and "k2"
		t.Fatalf("Sweep = %d, %v; want 2 records", n, err)
	}
	if _, err := st.Get(ctx, "k"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get after sweep: %v", err)
	}
	if n, err := st.Sweep(ctx, later.Add(4*window), 100); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v", n, err)
	}

	// Delete removes a record with parts; a new claim starts clean.
	d, _ := st.Reserve(ctx, idem.ReserveRequest{Key: "d", Fingerprint: fp, Now: now, Lease: lease, TTL: window})
	if err := st.Complete(ctx, "d", d.Record.Token, resp, now, now.Add(window)); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "d"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if n, err := st.Sweep(ctx, now.Add(10*window), 100); err != nil || n != 0 {
		t.Fatalf("Sweep after Delete found %d records (%v): parts left behind are not records", n, err)
	}
}
