package storeurl_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemkit/idem/store/storeurl"
)

// Open chooses the backend by the URL's scheme.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "storeurl")
	defer os.RemoveAll(dir)
	st, err := storeurl.Open(context.Background(), "sqlite://"+filepath.Join(dir, "idem.db"))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	fmt.Printf("%T\n", st)
	// Output: *sqlitestore.Store
}
