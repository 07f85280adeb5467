package mysqlstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/mysqlstore"
)

// An engine on MySQL or MariaDB: open, migrate, sweep, and run effects at most once per key.
func Example() {
	ctx := context.Background()
	st, err := mysqlstore.Open(ctx, "root@tcp(127.0.0.1:3306)/test", mysqlstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil { // at every start; a no-op when up to date
		log.Fatal(err)
	}
	sw, err := mysqlstore.StartSweeper(st, mysqlstore.SweeperOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer sw.Stop()
	eng, err := idem.New(st, idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := eng.Do(ctx, "tenant-1:pay-42", idem.Fingerprint([]byte("pay 42")), func(ctx context.Context) (idem.Response, error) {
		return idem.Response{Status: 201, Body: []byte("paid")}, nil
	})
	fmt.Println(string(res.Response.Body), res.Replayed, err)
}
