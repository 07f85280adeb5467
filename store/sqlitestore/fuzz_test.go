package sqlitestore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
	"github.com/idemkit/idem/store/storekit"
)

// FuzzStoredRecord writes arbitrary bytes and numbers into a stored row, as a bug, another
// program or a damaged disk might, and reads it back: Get and Reserve return a record or an
// error, never panic, and never report a completed record without a response.
//
//	go test -run '^$' -fuzz FuzzStoredRecord ./store/sqlitestore/
func FuzzStoredRecord(f *testing.F) {
	good := storekit.EncodeResponse(idem.Response{Status: 200, Header: map[string][]string{"A": {"1", "2"}}, Body: []byte("ok")})
	f.Add(good, int64(2), int64(1), false)
	f.Add(good[:len(good)-3], int64(2), int64(1), false)
	f.Add([]byte{1, 0, 0x80}, int64(2), int64(1), false)
	f.Add([]byte{}, int64(1), int64(-5), true)
	f.Add([]byte{2, 0}, int64(3), int64(1<<62), false)
	f.Add([]byte{1, 1, 0xc8, 1, 0xff, 0xff, 0xff, 0xff, 0x0f}, int64(2), int64(0), false)

	st, err := sqlitestore.Open(context.Background(), f.TempDir()+"/fuzz.db", sqlitestore.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	db := rawDB(f, st)
	ctx, now := context.Background(), time.Now()
	fp := idem.Fingerprint([]byte("fuzz"))
	f.Fuzz(func(t *testing.T, blob []byte, state, token int64, null bool) {
		var resp any = blob
		if null {
			resp = nil
		}
		if _, err := db.Exec(`INSERT OR REPLACE INTO idem_records
			(key, fingerprint, state, token, lease_until, attempts, response, created_at, completed_at, expires_at)
			VALUES ('k', ?, ?, ?, ?, 1, ?, ?, ?, ?)`,
			fp, state, token, now.Add(time.Minute).UnixMicro(), resp, now.UnixMicro(), now.UnixMicro(), now.Add(time.Hour).UnixMicro()); err != nil {
			t.Fatal(err)
		}
		for _, read := range []func() (idem.Record, error){
			func() (idem.Record, error) { return st.Get(ctx, "k") },
			func() (idem.Record, error) {
				res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "k", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
				return res.Record, err
			},
		} {
			rec, err := read()
			if err != nil {
				if !errors.Is(err, idem.ErrCorruptRecord) {
					t.Fatalf("error %v does not match ErrCorruptRecord", err)
				}
				continue
			}
			if rec.State == idem.StateCompleted && rec.Response == nil {
				t.Fatalf("completed record without a response: %+v", rec)
			}
			if rec.State != idem.StateCompleted && rec.State != idem.StateInProgress {
				t.Fatalf("record in unknown state: %+v", rec)
			}
		}
	})
}
