// Command unfenced is the idem CLI with a deliberately broken store, for the chaos harness to
// show that its verdict catches a store that does not fence: the scheme unfenced+<scheme>
// opens the store <scheme> would, wrapped so that Complete ignores the fencing token (the
// last completion wins, whoever holds the claim) and Extend never reports a lost lease. It is
// never built into the product.
package main

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/cli"
	"github.com/idemkit/idem/store/storeurl"
)

func main() {
	for _, scheme := range []string{"postgres", "redis"} {
		storeurl.Register("unfenced+"+scheme, openUnfenced)
	}
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func openUnfenced(ctx context.Context, u *url.URL) (storeurl.Store, error) {
	inner := *u
	inner.Scheme = strings.TrimPrefix(u.Scheme, "unfenced+")
	st, err := storeurl.Open(ctx, inner.String())
	if err != nil {
		return nil, err
	}
	if _, ok := st.(idem.Deleter); !ok {
		st.Close()
		return nil, errors.New("unfenced: the store cannot delete records")
	}
	return unfenced{st}, nil
}

// unfenced is a store that does not fence completions.
type unfenced struct{ storeurl.Store }

// Complete stores resp whatever the key's current claim: if token lost the claim, the record
// is deleted, claimed afresh and completed with the new token.
func (s unfenced) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	err := s.Store.Complete(ctx, key, token, resp, now, expiresAt)
	if !errors.Is(err, idem.ErrLeaseLost) {
		return err
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		return err
	}
	if err := s.Store.(idem.Deleter).Delete(ctx, key); err != nil {
		return err
	}
	res, err := s.Reserve(ctx, key, rec.Fingerprint, now, time.Minute, expiresAt.Sub(now))
	if err != nil {
		return err
	}
	return s.Store.Complete(ctx, key, res.Record.Token, resp, now, expiresAt)
}

// Extend never reports a lost lease.
func (s unfenced) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if err := s.Store.Extend(ctx, key, token, until); !errors.Is(err, idem.ErrLeaseLost) {
		return err
	}
	return nil
}
