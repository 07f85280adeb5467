package storeurl

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/sqlitestore"
)

func init() {
	Register("memory", openMemory)
	Register("sqlite", openSQLite)
}

func openMemory(_ context.Context, u *url.URL) (Store, error) {
	if err := newParams(u).done(); err != nil {
		return nil, err
	}
	return memstore.New(), nil
}

// openSQLite opens sqlite://PATH. sqlite://./idem.db and sqlite://idem.db are relative to the
// working directory, sqlite:///var/lib/idem.db is absolute. Parameters: table, busy_timeout
// (a Go duration), synchronous (NORMAL or FULL).
func openSQLite(ctx context.Context, u *url.URL) (Store, error) {
	path := u.Host + u.Path
	if u.Opaque != "" {
		path = u.Opaque
	}
	path = strings.TrimPrefix(path, "//")
	if path == "" {
		return nil, fmt.Errorf("%w: sqlite URL has no path (try sqlite://./idem.db)", idem.ErrInvalidInput)
	}
	p := newParams(u)
	opt := sqlitestore.Options{Table: p.get("table"), Synchronous: p.get("synchronous")}
	if v := p.get("busy_timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("%w: busy_timeout %q: %v", idem.ErrInvalidInput, v, err)
		}
		opt.BusyTimeout = d
	}
	if err := p.done(); err != nil {
		return nil, err
	}
	return sqlitestore.Open(ctx, path, opt)
}
