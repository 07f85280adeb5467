package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/redisstore"
)

// TestStartsOfOldRecords: records written before starts were counted (an attempts field
// without its s part) read with their attempts as their start count; a takeover of one, and a
// retry after one was released, go on counting from there. A malformed count is corrupt.
func TestStartsOfOldRecords(t *testing.T) {
	t.Parallel()
	rdb := standalone(t)
	st := newStore(t, rdb)
	ctx := context.Background()
	now := time.Now().Truncate(time.Microsecond)
	fp := idem.Fingerprint([]byte("old"))
	created := now.Add(-time.Minute).UnixMicro()
	old := func(key, lease, exp string, att int) {
		t.Helper()
		v := fmt.Sprintf("1|%d|%s|%d|%d||%s|op|%d|%s", created, lease, att, created, exp, len(fp), fp)
		if err := rdb.Set(ctx, redisstore.RecordKey(st, key), v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	past, future := fmt.Sprint(now.Add(-time.Second).UnixMicro()), fmt.Sprint(now.Add(time.Hour).UnixMicro())
	old("stale", past, future, 2)
	old("released", "0", "0", 2)
	if rec, err := st.Get(ctx, "stale"); err != nil || rec.Attempts != 2 || rec.Starts != 2 {
		t.Fatalf("Get of an old record = %+v, %v; want 2 attempts, 2 starts", rec, err)
	}
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "stale", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Takeover || res.Record.Attempts != 3 || res.Record.Starts != 3 || res.Record.CreatedAt.UnixMicro() != created {
		t.Fatalf("takeover of an old record = %+v, %v", res, err)
	}
	res, err = st.Reserve(ctx, idem.ReserveRequest{Key: "released", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed || res.Takeover || res.Record.Attempts != 1 || res.Record.Starts != 3 || res.Record.CreatedAt.UnixMicro() != created {
		t.Fatalf("retry of an old released record = %+v, %v", res, err)
	}
	if rec, err := st.Get(ctx, "released"); err != nil || rec.Attempts != 1 || rec.Starts != 3 {
		t.Fatalf("Get after the retry = %+v, %v; want 1 attempt, 3 starts", rec, err)
	}
	v := fmt.Sprintf("1|1|1|1sx|1||%s|op|%d|%s", future, len(fp), fp)
	if err := rdb.Set(ctx, redisstore.RecordKey(st, "bad"), v, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "bad"); !errors.Is(err, idem.ErrCorruptRecord) {
		t.Errorf("Get of a malformed start count: %v, want ErrCorruptRecord", err)
	}
}
