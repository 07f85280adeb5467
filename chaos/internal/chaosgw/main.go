// Command chaosgw is the idem command (internal/cli, exactly as cmd/idem runs it) with the
// postgres:// and redis:// store schemes registered when store/storeurl does not register them
// itself yet. The chaos harness builds it so that its gateways can share a PostgreSQL or Redis
// store; once storeurl registers those schemes, its own openers win and this adds nothing.
package main

import (
	"context"
	"errors"
	"net/url"
	"os"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/cli"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storeurl"
)

func main() {
	have := storeurl.Schemes()
	for _, s := range []string{"postgres", "postgresql"} {
		if !slices.Contains(have, s) {
			storeurl.Register(s, openPostgres)
		}
	}
	if !slices.Contains(have, "redis") {
		storeurl.Register("redis", openRedis)
	}
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// openPostgres opens a pgstore on the URL as pgxpool reads it, with the default table. The
// harness migrates the table before it starts any gateway.
func openPostgres(ctx context.Context, u *url.URL) (storeurl.Store, error) {
	return pgstore.Open(ctx, u.String(), pgstore.Options{})
}

// redisStore closes the client it was opened with.
type redisStore struct {
	*redisstore.Store
	client *redis.Client
}

func (s redisStore) Close() error { return errors.Join(s.Store.Close(), s.client.Close()) }

// openRedis opens a redisstore on redis://host:port/db with the default prefix.
func openRedis(ctx context.Context, u *url.URL) (storeurl.Store, error) {
	opt, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(opt)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, err
	}
	st, err := redisstore.New(redisstore.Options{Client: c})
	if err != nil {
		c.Close()
		return nil, err
	}
	return redisStore{Store: st, client: c}, nil
}
