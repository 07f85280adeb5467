package cli

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/storeurl"
)

// TestStoreFlagNamesEveryScheme checks that the --store flag of every command that opens a
// store names each scheme storeurl opens, so its help cannot fall behind a new backend.
func TestStoreFlagNamesEveryScheme(t *testing.T) {
	schemes := storeurl.Schemes()
	if len(schemes) < 6 {
		t.Fatalf("storeurl registers %d schemes: %q", len(schemes), schemes)
	}
	for _, cmd := range []string{"serve", "list", "inspect", "release", "sweep", "migrate", "console"} {
		t.Run(cmd, func(t *testing.T) {
			_, stdout, stderr := run(t, cmd, "-h")
			help := stdout + stderr
			_, usage, ok := strings.Cut(help, "  -store string\n")
			if !ok {
				t.Fatalf("idem %s -h has no --store flag:\n%s", cmd, help)
			}
			usage, _, _ = strings.Cut(usage, "\n")
			for _, s := range schemes {
				if !strings.Contains(usage, " "+s+"://") {
					t.Errorf("idem %s --store does not name %s://: %s", cmd, s, usage)
				}
			}
		})
	}
}

// unlisted is a store that cannot list its records.
type unlisted struct{ idem.Store }

func (unlisted) Close() error { return nil }

// TestListNamesTheStoresThatList checks idem list on a store that cannot list: it says so, and
// names the schemes whose stores can, every registered one but its own (storeurl's tests open
// each scheme and find an idem.Lister).
func TestListNamesTheStoresThatList(t *testing.T) {
	storeurl.Register("nolist", func(context.Context, *url.URL) (storeurl.Store, error) {
		return unlisted{memstore.New()}, nil
	})
	code, _, stderr := run(t, "list", "--store", "nolist://", "--scope", "none")
	if code == 0 || !strings.Contains(stderr, "the nolist:// store cannot list its records") {
		t.Fatalf("idem list on a store that cannot list: exit %d, %s", code, stderr)
	}
	_, can, _ := strings.Cut(stderr, "the stores of ")
	for _, s := range storeurl.Schemes() {
		if named := strings.Contains(can, " "+s+"://") || strings.HasPrefix(can, s+"://"); named != (s != "nolist") {
			t.Errorf("%s:// named among the stores that can list: %v; want %v (%s)", s, named, s != "nolist", stderr)
		}
	}
}
