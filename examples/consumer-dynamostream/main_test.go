package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
)

// Each payment and its event written in one transaction, the writer's retry refused, an event
// item rewritten, and the first worker killed halfway on DynamoDB Local: one receipt per
// payment.
func TestEveryReceiptSentOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test (DynamoDB Local); skipped with -short")
	}
	ep := testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
	if ep == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := dynamostore.LocalClient(ep, nil)
	var b [5]byte
	_, _ = rand.Read(b[:])
	sfx := hex.EncodeToString(b[:])
	tb := tables{Payments: "example_payments_" + sfx, Receipts: "example_receipts_" + sfx, Idem: "example_idem_" + sfx}
	t.Cleanup(func() { deleteTables(db, tb) })
	const payments = 20
	sm, err := run(ctx, db, localStreams(ep), tb, payments)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent %d (%d before the kill), replays %d, receipts %d, payments with one %d", sm.Sent, sm.SentBeforeKill, sm.Replays, sm.Receipts, sm.PaymentsWithOne)
	if !sm.RetryRefused {
		t.Error("the writer's retry of a payment was not refused")
	}
	for _, id := range sm.paymentIDs {
		if n := sm.ReceiptsPerPayment[id]; n != 1 {
			t.Errorf("payment %s: %d receipts, want 1", id, n)
		}
	}
	if sm.Receipts != payments || sm.Sent != payments || sm.Replays < 2 {
		t.Errorf("%d receipts, %d sent, %d replays; want %d, %d and at least 2 (the rewritten event item, and the change read again after the kill)",
			sm.Receipts, sm.Sent, sm.Replays, payments, payments)
	}
}
