package storeurl_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/idemkit/idem/store/memstore"
	"github.com/idemkit/idem/store/mysqlstore"
	"github.com/idemkit/idem/store/pgstore"
	"github.com/idemkit/idem/store/redisstore"
	"github.com/idemkit/idem/store/storeurl"
	"github.com/idemkit/idem/store/sweeper"
)

// roundTrip opens raw, claims and completes a key, reads it back and closes the store. The
// store must list its records (idem.Lister): idem list and the console read every store.
func roundTrip(t *testing.T, raw string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := storeurl.Open(ctx, raw)
	if err != nil {
		t.Fatalf("Open(%s): %v", raw, err)
	}
	defer st.Close()
	if _, ok := st.(idem.Lister); !ok {
		t.Errorf("%s: the store cannot list its records (no idem.Lister)", raw)
	}
	// Redis and DynamoDB delete expired records by themselves, through the store URL too, so
	// idem serve does not sweep them (a DynamoDB Sweep is a paid Scan); the others need it.
	selfExpiring := strings.HasPrefix(raw, "redis") || strings.HasPrefix(raw, "dynamodb")
	if sweeper.Needed(st) == selfExpiring {
		t.Errorf("sweeper.Needed(%s) = %v, want %v", raw, sweeper.Needed(st), !selfExpiring)
	}
	key := fmt.Sprintf("storeurl-%d", time.Now().UnixNano())
	now := time.Now()
	fp := idem.Fingerprint([]byte("x"))
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil || !res.Claimed {
		t.Fatalf("Reserve: %v %+v", err, res)
	}
	if err := st.Complete(ctx, key, res.Record.Token, idem.Response{Status: 201, Body: []byte("ok")}, now, now.Add(time.Hour)); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	rec, err := st.Get(ctx, key)
	if err != nil || rec.State != idem.StateCompleted || string(rec.Response.Body) != "ok" {
		t.Fatalf("Get: %v %+v", err, rec)
	}
}

// ownSQLTable returns a table name of this test run's own, starting with prefix, and drops
// that table and its migration row, through the PostgreSQL or MySQL store URL base+name, when
// the test ends: two test processes at once never share a table.
func ownSQLTable(t *testing.T, base, prefix string) string {
	t.Helper()
	table := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		st, err := storeurl.Open(ctx, base+table)
		if err != nil {
			t.Logf("dropping %s: %v", table, err)
			return
		}
		defer st.Close()
		switch s := st.(type) {
		case *pgstore.Store:
			_, err = s.Pool().Exec(ctx, `DROP TABLE IF EXISTS `+s.Table())
			if err == nil {
				_, err = s.Pool().Exec(ctx, `DELETE FROM `+pgstore.MigrationsTable+` WHERE tbl = $1`, table)
			}
		case *mysqlstore.Store:
			_, err = s.DB().ExecContext(ctx, `DROP TABLE IF EXISTS `+s.Table())
			if err == nil {
				_, err = s.DB().ExecContext(ctx, `DELETE FROM `+mysqlstore.MigrationsTable+` WHERE tbl = ?`, table)
			}
		default:
			err = fmt.Errorf("a %T, not a SQL store", st)
		}
		if err != nil {
			t.Errorf("dropping %s: %v", table, err)
		}
	})
	return table
}

func TestOpenEachScheme(t *testing.T) {
	covered := map[string]bool{}
	run := func(scheme string, f func(t *testing.T)) {
		covered[scheme] = true
		t.Run(scheme, f)
	}
	run("memory", func(t *testing.T) { roundTrip(t, "memory://") })
	run("sqlite", func(t *testing.T) { roundTrip(t, "sqlite://"+filepath.Join(t.TempDir(), "x.db")+"?table=t1") })
	run("postgres", func(t *testing.T) {
		u := testenv.PostgresURL(t)
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		table := ownSQLTable(t, u+sep+"table=", "storeurl_records")
		for q, want := range map[string]int{"": storeurl.PostgresGroupCommit, "&group_commit=0": 0, "&group_commit=3": 3} {
			raw := u + sep + "table=" + table + q
			roundTrip(t, raw)
			st, err := storeurl.Open(context.Background(), raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.(*pgstore.Store).GroupCommit(); got != want {
				t.Errorf("%s: GroupCommit %d, want %d", raw, got, want)
			}
			st.Close()
		}
	})
	run("mysql", func(t *testing.T) {
		testenv.MySQLDSN(t)
		base := "mysql://root@127.0.0.1:3306/test?table="
		roundTrip(t, base+ownSQLTable(t, base, "storeurl_records"))
	})
	run("redis", func(t *testing.T) { roundTrip(t, "redis://"+testenv.RedisAddr(t)+"/0?prefix=storeurl:") })
	run("redis/autopipeline", func(t *testing.T) {
		roundTrip(t, "redis://"+testenv.RedisAddr(t)+"/0?prefix=storeurl:&autopipeline=true")
	})
	run("redis+cluster", func(t *testing.T) {
		testenv.Service(t, "Redis Cluster", "IDEM_REDIS_CLUSTER_ADDRS", "127.0.0.1:7001", func(v string) string { return strings.Split(v, ",")[0] })
		roundTrip(t, "redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003?prefix=storeurl:")
		roundTrip(t, "redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003?prefix=storeurl:&autopipeline=1")
	})
	run("dynamodb", func(t *testing.T) {
		ep := testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
		table := fmt.Sprintf("storeurl_%d", time.Now().UnixNano())
		t.Cleanup(func() {
			_, _ = dynamostore.LocalClient(ep, http.DefaultTransport).DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
		})
		roundTrip(t, fmt.Sprintf("dynamodb://%s?endpoint=%s&create=true", table, ep))
	})
	run("postgresql", func(t *testing.T) {
		u := testenv.PostgresURL(t)
		_, rest, ok := strings.Cut(u, "://")
		if !ok {
			t.Fatalf("PostgreSQL URL %q has no scheme", u)
		}
		sep := "?"
		if strings.Contains(rest, "?") {
			sep = "&"
		}
		base := "postgresql://" + rest + sep + "table="
		roundTrip(t, base+ownSQLTable(t, base, "storeurl_records"))
	})
	// Every registered scheme has its subtest above, or is the TLS spelling of one that has and
	// opens the same way: no store a URL can name goes unchecked.
	tls := map[string]string{"rediss": "redis", "rediss+cluster": "redis+cluster"}
	for _, s := range storeurl.Schemes() {
		if plain, ok := tls[s]; ok && storeurl.SameOpener(s, plain) {
			s = plain
		}
		if !covered[s] {
			t.Errorf("the %s:// scheme is registered but no subtest opens and checks its store", s)
		}
	}
}

// memory:// is bounded by default; max_records and max_bytes change the bounds, 0 lifts one.
func TestOpenMemoryBounds(t *testing.T) {
	for raw, want := range map[string]memstore.Options{
		"memory://": {MaxRecords: storeurl.MemoryMaxRecords, MaxBytes: storeurl.MemoryMaxBytes},
		"memory://?max_records=10&max_bytes=1MiB": {MaxRecords: 10, MaxBytes: 1 << 20},
		"memory://?max_bytes=5000":                {MaxRecords: storeurl.MemoryMaxRecords, MaxBytes: 5000},
		"memory://?max_records=0&max_bytes=0":     {},
	} {
		st, err := storeurl.Open(context.Background(), raw)
		if err != nil {
			t.Fatalf("Open(%s): %v", raw, err)
		}
		if got := st.(*memstore.Store).Options(); got != want {
			t.Errorf("Open(%s): bounds %+v, want %+v", raw, got, want)
		}
		st.Close()
	}
	for _, raw := range []string{"memory://?max_records=-1", "memory://?max_records=x", "memory://?max_bytes=-1", "memory://?max_bytes=1XB"} {
		if _, err := storeurl.Open(context.Background(), raw); !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), "max_") {
			t.Errorf("Open(%s) = %v, want ErrInvalidInput naming the parameter", raw, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for raw, want := range map[string]string{
		"bogus://x":        "unknown scheme",
		"sqlite://":        "no path",
		"memory://?typo=1": "unknown parameter",
		"postgres://u:secret@127.0.0.1:1/db?migrate=maybe":   "migrate",
		"postgres://u:secret@127.0.0.1:1/db?group_commit=x":  "group_commit",
		"postgres://u:secret@127.0.0.1:1/db?group_commit=-1": "group_commit",
		"dynamodb://": "no table",
		"redis://u:secret@127.0.0.1:1/0?autopipeline=yes": "autopipeline",
	} {
		_, err := storeurl.Open(ctx, raw)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the password leaked into the error: %v", raw, err)
		}
	}
	if _, err := storeurl.Open(ctx, "bogus://x"); !errors.Is(err, storeurl.ErrUnknownScheme) {
		t.Errorf("unknown scheme: %v", err)
	}
}

// The Redis clients storeurl makes end a call at its context's deadline (go-redis's
// ContextTimeoutEnabled), as redisstore.Options.Client asks.
func TestRedisClientsHonorDeadlines(t *testing.T) {
	check := func(t *testing.T, raw string) {
		st, err := storeurl.Open(context.Background(), raw)
		if err != nil {
			t.Fatalf("Open(%s): %v", raw, err)
		}
		defer st.Close()
		opts := st.(interface{ Options() redisstore.Options }).Options()
		var enabled bool
		switch c := opts.Client.(type) {
		case *redis.Client:
			enabled = c.Options().ContextTimeoutEnabled
		case *redis.ClusterClient:
			enabled = c.Options().ContextTimeoutEnabled
		}
		if !enabled {
			t.Errorf("%s: a %T without ContextTimeoutEnabled", raw, opts.Client)
		}
	}
	t.Run("redis", func(t *testing.T) { check(t, "redis://"+testenv.RedisAddr(t)+"/0?prefix=storeurl:") })
	t.Run("redis+cluster", func(t *testing.T) {
		addrs := testenv.Service(t, "Redis Cluster", "IDEM_REDIS_CLUSTER_ADDRS", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003",
			func(v string) string { return strings.Split(v, ",")[0] })
		check(t, "redis+cluster://"+addrs+"?prefix=storeurl:")
	})
}
