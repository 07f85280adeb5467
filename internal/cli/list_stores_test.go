package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/idemkit/idem/store/storeurl"
)

// seedURL writes, through the store at raw, the records seed writes to SQLite: done (201),
// stuck, stale (lease run out), held (lease extended to its expiry), old (created 3h ago,
// expired a second ago: recently enough that neither store's storage TTL has deleted it).
func seedURL(t *testing.T, raw string) {
	t.Helper()
	ctx := context.Background()
	st, err := storeurl.Open(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	fp := idem.Fingerprint([]byte("x"))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: "done", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	must(err)
	must(st.Complete(ctx, "done", res.Record.Token, idem.Response{Status: 201, Body: []byte(`{"id":"ch_1"}`)}, now, now.Add(time.Hour)))
	_, err = st.Reserve(ctx, idem.ReserveRequest{Key: "stuck", Fingerprint: fp, Now: now, Lease: time.Hour, TTL: 2 * time.Hour})
	must(err)
	_, err = st.Reserve(ctx, idem.ReserveRequest{Key: "stale", Fingerprint: fp, Now: now.Add(-2 * time.Minute), Lease: time.Minute, TTL: time.Hour})
	must(err)
	res, err = st.Reserve(ctx, idem.ReserveRequest{Key: "held", Fingerprint: fp, Now: now, Lease: time.Minute, TTL: time.Hour})
	must(err)
	must(st.Extend(ctx, "held", res.Record.Token, now.Add(time.Hour)))
	res, err = st.Reserve(ctx, idem.ReserveRequest{Key: "old", Fingerprint: fp, Now: now.Add(-3 * time.Hour), Lease: time.Minute, TTL: time.Hour})
	must(err)
	must(st.Complete(ctx, "old", res.Record.Token, idem.Response{Status: 200}, now.Add(-3*time.Hour), now.Add(-time.Second)))
}

// checkListing runs `idem list` on store, seeded by seedURL: every record in key order with
// its condition, the filters, paging with --limit and --cursor, and JSON lines.
func checkListing(t *testing.T, store string) {
	t.Helper()
	keys := func(out string) string {
		var ks []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			ks = append(ks, strings.Fields(line)[0])
		}
		return strings.Join(ks, " ")
	}
	code, out, errs := run(t, "list", "--store", store)
	if code != 0 || errs != "" || keys(out) != "done held old stale stuck" {
		t.Fatalf("list: %d %q %q", code, out, errs)
	}
	for _, want := range []string{"completed", "held", "running", "stale", "expired", "201"} {
		if !strings.Contains(out, want) {
			t.Errorf("list output lacks %q:\n%s", want, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "stuck"}, "held stale"},
		{[]string{"--state", "running"}, "stuck"},
		{[]string{"--state", "completed"}, "done"},
		{[]string{"--state", "expired"}, "old"},
		{[]string{"--older-than", "90m"}, "old"},
		{[]string{"--key", "st"}, "stale stuck"},
	} {
		code, out, errs := run(t, append([]string{"list", "--store", store}, tc.args...)...)
		if got := keys(out); code != 0 || got != tc.want {
			t.Errorf("list %q: %d %q %q, want %q", tc.args, code, got, errs, tc.want)
		}
	}
	code, out, errs = run(t, "list", "--store", store, "--limit", "2")
	if got := keys(out); code != 0 || got != "done held" || !strings.Contains(errs, "--cursor ") {
		t.Fatalf("--limit 2: %d %q %q", code, got, errs)
	}
	cursor := strings.TrimSpace(errs[strings.Index(errs, "--cursor ")+len("--cursor "):])
	code, out, errs = run(t, "list", "--store", store, "--cursor", cursor)
	if got := keys(out); code != 0 || got != "old stale stuck" || errs != "" {
		t.Errorf("--cursor: %d %q %q", code, got, errs)
	}
	code, out, _ = run(t, "list", "--json", "--store", store, "--key", "d")
	var r listed
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); code != 0 || err != nil ||
		r.Key != "done" || r.Status != 201 || r.Condition != "completed" || r.Attempts != 1 {
		t.Errorf("--json --key d: %d %q %v", code, out, err)
	}
}

// dropRedisPrefix deletes the keys under prefix on the Redis server at addr when the test ends.
func dropRedisPrefix(t *testing.T, addr, prefix string) {
	t.Cleanup(func() {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
}

func TestListRedis(t *testing.T) {
	t.Parallel()
	addr := testenv.RedisAddr(t)
	prefix := fmt.Sprintf("idemclilist%08x:", rand.Uint32())
	dropRedisPrefix(t, addr, prefix)
	store := "redis://" + addr + "/0?prefix=" + url.QueryEscape(prefix)
	seedURL(t, store)
	checkListing(t, store)
}

func TestListDynamoDB(t *testing.T) {
	t.Parallel()
	ep := testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
	table := fmt.Sprintf("idemclilist_%08x", rand.Uint32())
	t.Cleanup(func() {
		_, err := dynamostore.LocalClient(ep, nil).DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
		if err != nil {
			t.Errorf("DeleteTable %s: %v", table, err)
		}
	})
	seedURL(t, "dynamodb://"+table+"?create=true&endpoint="+url.QueryEscape(ep))
	checkListing(t, "dynamodb://"+table+"?endpoint="+url.QueryEscape(ep))
}
