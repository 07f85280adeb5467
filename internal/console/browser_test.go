package console_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/idemkit/idem/store/storeurl"
)

// TestBrowserNewestFirst drives the front page with a real headless chromium on every store
// that lists (all list newest first; Redis standalone and Cluster, DynamoDB): more than one page of older keys, then a newer key whose key sorts
// after all of them, is first on page 1; each filter (time range, route, status, state)
// shows exactly its records; and a record claimed while the page is open appears without a
// reload, while the filter stays applied, and not while updates are paused.
func TestBrowserNewestFirst(t *testing.T) {
	exec := cmp.Or(os.Getenv("IDEM_CHROMIUM"), "/usr/bin/chromium")
	if _, err := os.Stat(exec); err != nil {
		testenv.Missing(t, "no chromium at %s (%v): run scripts/chromium.sh, or set IDEM_CHROMIUM", exec, err)
	}
	table := fmt.Sprintf("console_%08x", rand.Uint32())
	stores := map[string]func(t *testing.T) string{
		"memory": func(*testing.T) string { return "memory://" },
		"sqlite": func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "c.db") + "?table=" + table },
		"postgres": func(t *testing.T) string {
			u := testenv.PostgresURL(t)
			return u + map[bool]string{true: "&", false: "?"}[strings.Contains(u, "?")] + "table=" + table
		},
		"postgres-partitioned": func(t *testing.T) string {
			u := testenv.PostgresURL(t)
			return u + map[bool]string{true: "&", false: "?"}[strings.Contains(u, "?")] + "table=" + table + "_p&partition_width=1h"
		},
		"mysql": func(t *testing.T) string {
			testenv.MySQLDSN(t)
			return "mysql://root@127.0.0.1:3306/test?table=" + table
		},
		"redis": func(t *testing.T) string {
			addr := testenv.RedisAddr(t)
			prefix := dropRedisPrefix(t, redis.NewClient(&redis.Options{Addr: addr}))
			return "redis://" + addr + "/0?prefix=" + url.QueryEscape(prefix)
		},
		"redis-cluster": func(t *testing.T) string {
			addrs := strings.Split(testenv.Service(t, "Redis Cluster", "IDEM_REDIS_CLUSTER_ADDRS",
				"127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003", func(v string) string { return strings.Split(v, ",")[0] }), ",")
			prefix := dropRedisPrefix(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs}))
			return "redis+cluster://" + strings.Join(addrs, ",") + "?prefix=" + url.QueryEscape(prefix)
		},
	}
	// DynamoDB through a client whose connections the test closes (goleak watches them).
	openDynamoDB := func(t *testing.T) storeurl.Store {
		ep := testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
		tr := http.DefaultTransport.(*http.Transport).Clone()
		client := dynamostore.LocalClient(ep, tr)
		st, err := dynamostore.New(dynamostore.Options{Client: client, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)}); err != nil {
				t.Errorf("DeleteTable %s: %v", table, err)
			}
			tr.CloseIdleConnections()
		})
		if err := st.CreateTable(context.Background(), dynamostore.TableOptions{}); err != nil {
			t.Fatal(err)
		}
		return st
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exec), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 860))
	defer cancelAlloc()
	for _, name := range []string{"memory", "sqlite", "postgres", "postgres-partitioned", "mysql", "redis", "redis-cluster", "dynamodb"} {
		t.Run(name, func(t *testing.T) {
			var st storeurl.Store
			if name == "dynamodb" {
				st = openDynamoDB(t)
			} else {
				var err error
				if st, err = storeurl.Open(context.Background(), stores[name](t)); err != nil {
					t.Fatalf("open %s: %v", name, err)
				}
			}
			t.Cleanup(func() { st.Close() })
			browseNewest(t, allocCtx, st)
		})
	}
}

// dropRedisPrefix returns a key prefix of the test's own and deletes its keys from every
// master of rdb when the test ends.
func dropRedisPrefix(t *testing.T, rdb redis.UniversalClient) string {
	prefix := fmt.Sprintf("idemconsole%08x:", rand.Uint32())
	t.Cleanup(func() {
		defer rdb.Close()
		ctx := context.Background()
		drop := func(ctx context.Context, c *redis.Client) error {
			iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
			return iter.Err()
		}
		var err error
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(ctx, drop)
		} else {
			err = drop(ctx, rdb.(*redis.Client))
		}
		if err != nil {
			t.Errorf("dropping %s*: %v", prefix, err)
		}
	})
	return prefix
}

func browseNewest(t *testing.T, allocCtx context.Context, st storeurl.Store) {
	c, err := console.New(console.Options{Store: st, Token: token, Refresh: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(func() { srv.Close(); c.Close() })
	ctx := context.Background()
	now := time.Now()
	claim := func(key, route string, created time.Time, status int) {
		t.Helper()
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key, Fingerprint: fp, Route: route, Now: created, Lease: 3 * time.Hour, TTL: 4 * time.Hour})
		if err != nil || !res.Claimed {
			t.Fatalf("claim %q: %+v %v", key, res, err)
		}
		if status != 0 {
			if err := st.Complete(ctx, key, res.Record.Token, idem.Response{Status: status}, created, created.Add(4*time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// More than one page (the console shows 200 rows) of older keys, an hour to a minute old,
	// then the newest, whose key sorts after every other.
	const older = 230
	for i := range older {
		route, status := "POST /a", 201
		if i%2 == 1 {
			route, status = "POST /b", 0
		}
		claim(fmt.Sprintf("t|k%04d", older-i), route, now.Add(-time.Hour+time.Duration(i)*10*time.Second), status)
	}
	claim("t|zzz-newest", "POST /c", now.Add(-time.Second), 202)

	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	bctx, cancelTimeout := context.WithTimeout(bctx, 90*time.Second)
	defer cancelTimeout()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	load := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		resp, err := chromedp.RunResponse(bctx, steps...)
		if err != nil || resp.Status != http.StatusOK {
			t.Fatalf("%s: %v %v", what, resp, err)
		}
	}
	listed := func() []string {
		t.Helper()
		res, err := chromedp.Run(bctx, chromedp.Evaluate[json.RawMessage](`Array.from(document.querySelectorAll("a.key")).map(a => a.textContent)`))
		var keys []string
		if err == nil {
			err = json.Unmarshal(res, &keys)
		}
		if err != nil {
			t.Fatalf("listed keys: %v", err)
		}
		return keys
	}
	do("token", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + token}})
		return err
	}))

	// Page 1: the newest record first, though its key sorts last; a next page exists.
	load("list", chromedp.Navigate(srv.URL+"/"))
	keys := listed()
	if len(keys) != 200 || keys[0] != "zzz-newest" || keys[1] != "k0001" {
		t.Fatalf("page 1: %d rows, first %q, want zzz-newest then k0001", len(keys), keys[:min(3, len(keys))])
	}
	// The list refreshes itself under the test's feet: follow the link's address rather than
	// click a node that a refresh may have replaced.
	next, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("next").href`))
	if err != nil {
		t.Fatalf("next page link: %v", err)
	}
	load("page 2", chromedp.Navigate(next))
	if keys := listed(); len(keys) != older+1-200 || slices.Contains(keys, "zzz-newest") || keys[len(keys)-1] != fmt.Sprintf("k%04d", older) {
		t.Fatalf("page 2: %q", keys)
	}

	// Each filter, through the form.
	search := func(what string, fields map[string]string, want func(i int) bool, newest bool) {
		t.Helper()
		load("front page", chromedp.Navigate(srv.URL+"/"))
		var steps []chromedp.Action[chromedp.Void]
		for sel, v := range fields {
			steps = append(steps, chromedp.SetValue(chromedp.CSS(sel), v))
		}
		do(what, steps...)
		load(what, chromedp.Click(chromedp.CSS("#search")))
		var wantKeys []string
		if newest {
			wantKeys = append(wantKeys, "zzz-newest")
		}
		for i := older - 1; i >= 0 && len(wantKeys) < 200; i-- {
			if want(i) {
				wantKeys = append(wantKeys, fmt.Sprintf("k%04d", older-i))
			}
		}
		if got := listed(); !slices.Equal(got, wantKeys) {
			t.Errorf("%s: listed %d %q…, want %d %q…", what, len(got), got[:min(3, len(got))], len(wantKeys), wantKeys[:min(3, len(wantKeys))])
		}
	}
	search("route", map[string]string{"#route": "POST /b"}, func(i int) bool { return i%2 == 1 }, false)
	search("status", map[string]string{"#status": "201"}, func(i int) bool { return i%2 == 0 }, false)
	search("state", map[string]string{`select[name="state"]`: "running"}, func(i int) bool { return i%2 == 1 }, false)
	// Created between 40 and 20 minutes ago: i*10s in [20m, 40m).
	search("time range", map[string]string{"#since": now.Add(-40 * time.Minute).UTC().Format(time.RFC3339Nano),
		"#until": now.Add(-20 * time.Minute).UTC().Format(time.RFC3339Nano)}, func(i int) bool {
		return i*10 >= 20*60 && i*10 < 40*60
	}, false)
	search("since", map[string]string{"#since": "2m"}, func(i int) bool { return i*10 >= 58*60 }, true)

	// A record claimed while the page is open appears without a reload, the filter kept;
	// paused, the list stays as it is.
	load("route c", chromedp.Navigate(srv.URL+"/?route="+strings.ReplaceAll("POST /c", " ", "+")))
	if keys := listed(); !slices.Equal(keys, []string{"zzz-newest"}) {
		t.Fatalf("route POST /c: %q", keys)
	}
	// toggle clicks the pause button once the page's script has taken it over (it names the
	// refresh interval then) and the rates chart above it, if any, has loaded, and checks
	// that the button says what was asked: a click that lands before the script has run does
	// nothing, and the page would go on refreshing.
	toggle := func(what string, pressed string) {
		t.Helper()
		ready := `document.getElementById("live-state").textContent !== "The list refreshes every few seconds." &&
			!(document.getElementById("rates")?.textContent ?? "").startsWith("Loading")` // the chart moves the button when it loads
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](ready))
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the page's script never took the pause button over", what)
			}
		}
		do(what, chromedp.Click(chromedp.CSS("#live")))
		got, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("live").getAttribute("aria-pressed")`))
		if err != nil || got != pressed {
			t.Fatalf("%s: the button's aria-pressed is %q (%v), want %q", what, got, err, pressed)
		}
	}
	toggle("pause", "true")
	claim("t|aaa-while-paused", "POST /c", time.Now(), 0)
	claim("t|aaa-other-route", "POST /a", time.Now(), 0)
	time.Sleep(time.Second)
	if keys := listed(); !slices.Equal(keys, []string{"zzz-newest"}) {
		t.Fatalf("while paused: %q", keys)
	}
	toggle("resume", "false")
	deadline := time.Now().Add(10 * time.Second)
	for {
		keys := listed()
		if slices.Equal(keys, []string{"aaa-while-paused", "zzz-newest"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after resuming, the list shows %q, want the new record first, the filter kept", keys)
		}
		time.Sleep(100 * time.Millisecond)
	}
	claim("t|aaa-live", "POST /c", time.Now(), 0)
	deadline = time.Now().Add(10 * time.Second)
	for !slices.Equal(listed(), []string{"aaa-live", "aaa-while-paused", "zzz-newest"}) {
		if time.Now().After(deadline) {
			t.Fatalf("a new record never appeared: %q", listed())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
