package dynamostore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/dynamostore"
)

// afterFailedPut runs fn once, after the first PutItem whose condition failed: between the
// read that a failed conditional write is (ALL_OLD) and the write that Reserve decides on it.
type afterFailedPut struct {
	dynamostore.API
	once sync.Once
	fn   func()
}

func (a *afterFailedPut) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := a.API.PutItem(ctx, in, optFns...)
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		a.once.Do(a.fn)
	}
	return out, err
}

// TestTakeoverRechecksTheLease: a takeover is decided on the record a failed PutItem returned,
// and written by a second PutItem. If the holder acts in between (a heartbeat extends its
// lease, or it completes), the takeover's own condition must see it and fail: it re-checks
// that the record is still in progress, with its lease run out, not only that the token is
// the same (neither Extend nor Complete changes the token).
func TestTakeoverRechecksTheLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		act   func(st *dynamostore.Store, key string, holder idem.Record, now time.Time) error
		check func(t *testing.T, rec idem.Record, now time.Time)
	}{
		{"Extend", func(st *dynamostore.Store, key string, holder idem.Record, now time.Time) error {
			return st.Extend(context.Background(), key, holder.Token, now.Add(time.Minute))
		}, func(t *testing.T, rec idem.Record, now time.Time) {
			if rec.State != idem.StateInProgress || !rec.LeaseUntil.Equal(now.Add(time.Minute)) {
				t.Fatalf("record = %+v, want the holder's extended claim", rec)
			}
		}},
		{"Complete", func(st *dynamostore.Store, key string, holder idem.Record, now time.Time) error {
			return st.Complete(context.Background(), key, holder.Token, idem.Response{Status: 201}, now, now.Add(time.Hour))
		}, func(t *testing.T, rec idem.Record, now time.Time) {
			if rec.State != idem.StateCompleted || rec.Response == nil || rec.Response.Status != 201 {
				t.Fatalf("record = %+v, want the holder's completed record", rec)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, dynamostore.Options{})
			ctx := context.Background()
			fp := idem.Fingerprint(nil)
			base := time.Now().Truncate(time.Microsecond)
			const key = "k"
			first, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: base, Lease: time.Second, TTL: time.Hour})
			if err != nil || !first.Claimed {
				t.Fatalf("Reserve = %+v, %v", first, err)
			}
			now := base.Add(2 * time.Second) // the holder's lease ran out at base+1s
			var actErr error
			racer, err := dynamostore.New(dynamostore.Options{Table: b.table, Client: &afterFailedPut{
				API: b.client,
				fn:  func() { actErr = tc.act(b.store, key, first.Record, now) },
			}})
			if err != nil {
				t.Fatal(err)
			}
			res, err := racer.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Second, TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if actErr != nil {
				t.Fatalf("the holder's %s between the read and the takeover: %v", tc.name, actErr)
			}
			if res.Claimed {
				t.Fatalf("Reserve took over a claim whose holder acted after the read: %+v", res)
			}
			tc.check(t, res.Record, now)
			rec, err := b.store.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Token != first.Record.Token {
				t.Fatalf("stored token %d, want the holder's %d", rec.Token, first.Record.Token)
			}
			tc.check(t, rec, now)
		})
	}
}

// beforeDelete runs fn once, before the first DeleteItem is sent: after Sweep's Scan found
// the record expired.
type beforeDelete struct {
	dynamostore.API
	once sync.Once
	fn   func()
}

func (b *beforeDelete) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	b.once.Do(b.fn)
	return b.API.DeleteItem(ctx, in, optFns...)
}

// TestSweepKeepsRecordClaimedAgain: a record that Sweep's Scan found expired, then claimed
// again before Sweep's DeleteItem, is kept: the deletion is conditioned on expires_at.
func TestSweepKeepsRecordClaimedAgain(t *testing.T) {
	t.Parallel()
	b := setup(t, dynamostore.Options{})
	ctx := context.Background()
	fp := idem.Fingerprint(nil)
	base := time.Now().Truncate(time.Microsecond)
	const key = "k"
	if res, err := b.store.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: base, Lease: time.Second, TTL: time.Minute}); err != nil || !res.Claimed {
		t.Fatalf("Reserve = %+v, %v", res, err)
	}
	now := base.Add(2 * time.Minute) // the claim expired at base+1m
	var again idem.Reservation
	var againErr error
	sweeper, err := dynamostore.New(dynamostore.Options{Table: b.table, Client: &beforeDelete{
		API: b.client,
		fn: func() {
			again, againErr = b.store.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := sweeper.Sweep(ctx, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	if againErr != nil || !again.Claimed {
		t.Fatalf("claim between the Scan and the deletion = %+v, %v", again, againErr)
	}
	rec, err := b.store.Get(ctx, key)
	if err != nil {
		t.Fatalf("the record claimed again after the Scan: %v (Sweep deleted %d)", err, n)
	}
	if rec.Token != again.Record.Token || n != 0 {
		t.Fatalf("after Sweep: record %+v, %d deleted; want the new claim (token %d) and 0", rec, n, again.Record.Token)
	}
}
