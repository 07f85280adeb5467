package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
)

// TestRestartReplaysSkipTheWriter: a Store opened on a file whose keys it has never seen, as
// after a restart, learns that its unknown keys exist and answers their replays from the read
// connections. While another process holds the file's write lock, those replays return at
// once; a Store that kept claiming first would wait for the lock and fail. New keys still
// claim, and make it claim first again.
func TestRestartReplaysSkipTheWriter(t *testing.T) {
	t.Parallel()
	const keys = 200
	fp := idem.Fingerprint([]byte("body"))
	resp := idem.Response{Status: 201, Body: []byte("made")}
	for _, via := range []string{"Reserve", "DoTx"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "idem.db")
			first, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			for i := range keys {
				key := fmt.Sprintf("k%d", i)
				if via == "DoTx" {
					_, err = first.DoTx(ctx, key, fp, func(context.Context, *sql.Tx) (idem.Response, error) { return resp, nil })
				} else {
					var r idem.Reservation
					if r, err = first.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour}); err == nil {
						err = first.Complete(ctx, key, r.Record.Token, resp, now, now.Add(time.Hour))
					}
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}

			st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{BusyTimeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			ran := 0
			replay := func(i int) error {
				key := fmt.Sprintf("k%d", i)
				if via == "DoTx" {
					res, err := st.DoTx(ctx, key, fp, func(context.Context, *sql.Tx) (idem.Response, error) { ran++; return resp, nil })
					if err == nil && (!res.Replayed || string(res.Response.Body) != "made") {
						err = fmt.Errorf("%s: %+v, want the stored answer replayed", key, res)
					}
					return err
				}
				r, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
				if err == nil && (r.Claimed || r.Record.State != idem.StateCompleted) {
					err = fmt.Errorf("%s: %+v, want the completed record", key, r)
				}
				return err
			}
			// The first replays after the restart claim first, find the records and learn.
			for i := range keys / 2 {
				if err := replay(i); err != nil {
					t.Fatal(err)
				}
			}

			other, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			conn, err := other.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			for i := keys / 2; i < keys; i++ {
				if err := replay(i); err != nil {
					t.Fatalf("replay of a key this Store has not seen, behind another writer: %v", err)
				}
			}
			t.Logf("%d replays behind another writer in %s", keys/2, time.Since(start).Round(time.Millisecond))
			if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
			if ran != 0 {
				t.Fatalf("the function ran %d times for completed keys, want 0", ran)
			}
			for i := range 2 * keys {
				key := fmt.Sprintf("new%d", i)
				if via == "DoTx" {
					res, err := st.DoTx(ctx, key, fp, func(context.Context, *sql.Tx) (idem.Response, error) { return resp, nil })
					if err != nil || res.Replayed || !res.Kept {
						t.Fatalf("new key %s: %+v %v, want it run and kept", key, res, err)
					}
					continue
				}
				r, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: time.Now(), Lease: time.Minute, TTL: time.Hour})
				if err != nil || !r.Claimed {
					t.Fatalf("new key %s: %+v %v, want it claimed", key, r, err)
				}
			}
		})
	}
}
