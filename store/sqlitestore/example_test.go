package sqlitestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/sqlitestore"
)

// An engine over a SQLite file: the charge runs once, and a retry, even from a process
// started later on the same file, gets the stored response.
func Example() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "idem.db")
	ctx := context.Background()
	body := []byte(`{"amount":1000}`)
	charge := func(context.Context) (idem.Response, error) {
		fmt.Println("charging the card")
		return idem.Response{Status: 201, Body: []byte(`{"charge":"ch_1"}`)}, nil
	}

	for run := range 2 { // two "processes", one after the other
		st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
		if err != nil {
			panic(err)
		}
		eng, err := idem.New(st, idem.Options{})
		if err != nil {
			panic(err)
		}
		res, err := eng.Do(ctx, "order-1001", idem.Fingerprint(body), charge)
		if err != nil {
			panic(err)
		}
		fmt.Println(run, res.Response.Status, string(res.Response.Body), "replayed:", res.Replayed)
		st.Close()
	}
	// Output:
	// charging the card
	// 0 201 {"charge":"ch_1"} replayed: false
	// 1 201 {"charge":"ch_1"} replayed: true
}

// Options: a table per application sharing the file, and every commit synced to disk.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "shared.db"), sqlitestore.Options{
		Table:       "billing_idem",
		Synchronous: "FULL",
		BusyTimeout: 10 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	fmt.Println(st.Table(), "schema version", sqlitestore.SchemaVersion)

	_, err = sqlitestore.Open(context.Background(), filepath.Join(dir, "shared.db"), sqlitestore.Options{Table: "billing-idem"})
	fmt.Println(err)
	// Output:
	// billing_idem schema version 5
	// sqlitestore: invalid options: Options.Table "billing-idem" is not a valid table name (1 to 48 letters, digits and underscores, not starting with a digit or sqlite_)
}

// Sweep deletes expired records in short batches; loop until a batch comes back short.
func ExampleStore_Sweep() {
	dir, _ := os.MkdirTemp("", "idem-example")
	defer os.RemoveAll(dir)
	st, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "idem.db"), sqlitestore.Options{})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	ctx, now := context.Background(), time.Now()
	for i := range 5 {
		// Claims with a one-minute window, never completed.
		if _, err := st.Reserve(ctx, idem.ReserveRequest{Key: fmt.Sprint("job-", i), Fingerprint: idem.Fingerprint(nil), Now: now, Lease: time.Second, TTL: time.Minute}); err != nil {
			panic(err)
		}
	}
	total := 0
	for {
		n, err := st.Sweep(ctx, now.Add(time.Hour), 2)
		if err != nil {
			panic(err)
		}
		total += n
		if n < 2 {
			break
		}
	}
	fmt.Println("swept", total)
	// Output:
	// swept 5
}
