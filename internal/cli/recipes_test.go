package cli

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/store/sqlitestore"
)

// tenant is the scope value of the README's recipes, and recipeSecret the gateways' secret.
const (
	tenant       = "sk_live_123"
	recipeSecret = "recipe-secret-0123456789abcdef"
)

// seedStates writes a SQLite store with one record of tenant in each condition, and one of
// another tenant, and returns its URL and whether the store keeps a released claim's record.
func seedStates(t *testing.T) (string, bool) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	key := func(value, k string) string {
		sk, err := idemhttp.KeyedStorageKey([]byte(recipeSecret), value, k)
		if err != nil {
			t.Fatal(err)
		}
		return sk
	}
	now := time.Now()
	fp := idem.Fingerprint([]byte("x"))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	reserve := func(k string, at time.Time, lease, window time.Duration) idem.Record {
		t.Helper()
		res, err := st.Reserve(ctx, idem.ReserveRequest{Key: key(tenant, k), Fingerprint: fp, Now: at, Lease: lease, TTL: window})
		must(err)
		return res.Record
	}
	r := reserve("order-1001", now, time.Minute, time.Hour) // completed
	must(st.Complete(ctx, r.Key, r.Token, idem.Response{Status: 201}, now, now.Add(time.Hour)))
	reserve("order-1002", now.Add(-20*time.Minute), time.Hour, 2*time.Hour)  // running for 20m: stuck
	reserve("order-1003", now.Add(-2*time.Minute), time.Minute, time.Hour)   // stale
	r = reserve("order-1004", now, time.Minute, time.Hour)                   // held
	must(st.Extend(ctx, r.Key, r.Token, now.Add(time.Hour)))                 //
	reserve("order-1005", now, time.Hour, 2*time.Hour)                       // running, not stuck
	r = reserve("order-1006", now, time.Minute, time.Hour)                   // released
	must(st.Release(ctx, r.Key, r.Token))                                    //
	r = reserve("order-1007", now.Add(-3*time.Hour), time.Minute, time.Hour) // expired
	must(st.Complete(ctx, r.Key, r.Token, idem.Response{Status: 200}, now.Add(-3*time.Hour), now.Add(-time.Second)))
	_, err = st.Reserve(ctx, idem.ReserveRequest{Key: key("sk_live_other", "order-1001"), Fingerprint: fp, Now: now.Add(-2 * time.Minute), Lease: time.Minute, TTL: time.Hour}) // another tenant's stale claim
	must(err)
	_, err = st.Get(ctx, key(tenant, "order-1006"))
	kept := err == nil
	if err != nil && !errors.Is(err, idem.ErrNotFound) {
		t.Fatal(err)
	}
	return "sqlite://" + path, kept
}

// listKeys runs idem list with args and returns the client keys it printed.
func listKeys(t *testing.T, vars map[string]string, args ...string) (int, []string, string) {
	t.Helper()
	var out, errb strings.Builder
	code := mainEnv(context.Background(), append([]string{"list"}, args...), &env{stdout: &out, stderr: &errb, getenv: func(k string) string { return vars[k] }})
	var keys []string
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !strings.HasPrefix(lines[0], "{") {
		lines = lines[1:] // the table's header
	}
	for _, line := range lines {
		if strings.HasPrefix(line, "{") {
			i := strings.Index(line, `"client_key":"`)
			if i < 0 {
				t.Fatalf("no client_key in %s", line)
			}
			rest := line[i+len(`"client_key":"`):]
			keys = append(keys, rest[:strings.Index(rest, `"`)])
			continue
		}
		_, client, _ := strings.Cut(strings.Fields(line)[0], "|")
		keys = append(keys, client)
	}
	return code, keys, errb.String()
}

// Every --state word finds the records in that condition, and the old in_progress is refused
// with an error naming the new words.
func TestListStates(t *testing.T) {
	t.Parallel()
	store, keptReleased := seedStates(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(recipeSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"IDEM_STORE": store, "IDEM_SCOPE_SECRET_FILE": secret}
	released := []string{}
	if keptReleased {
		released = []string{"order-1006"}
	}
	for state, want := range map[string][]string{
		"any":       append([]string{"order-1001", "order-1002", "order-1003", "order-1004", "order-1005", "order-1007"}, released...),
		"stuck":     {"order-1002", "order-1003", "order-1004"},
		"running":   {"order-1002", "order-1005"},
		"held":      {"order-1004"},
		"stale":     {"order-1003"},
		"released":  released,
		"completed": {"order-1001"},
		"expired":   {"order-1007"},
	} {
		code, got, errs := listKeys(t, env, "--scope-value", tenant, "--state", state)
		slices.Sort(want)
		if code != 0 || !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("list --state %s: %d %v %q, want %v", state, code, got, errs, want)
		}
	}
	code, _, errs := listKeys(t, env, "--state", "in_progress")
	if code != 2 || !strings.Contains(errs, "running, held, stale or released") || !strings.Contains(errs, "stuck") {
		t.Errorf("--state in_progress: %d %q, want a usage error naming the new words", code, errs)
	}
	if code, _, errs := listKeys(t, env, "--scope-value", tenant, "--state", "stuck", "--stuck-after", "30m"); code != 0 || strings.Contains(errs, "order-1002") {
		t.Errorf("--stuck-after 30m: %d %q", code, errs)
	}
}

// recipes are the `idem list` command lines of the README and docs, with the client keys each
// returns on the store seedStates writes. A recipe added to the docs fails this test until it
// is added here with what it returns.
var recipes = map[string][]string{
	"idem list --scope-value sk_live_123 --state stuck --json": {"order-1002", "order-1003", "order-1004"},
	"idem list --scope-value sk_live_123 --key order-1001":     {"order-1001"},
}

// The docs' `idem list` recipes return what they say.
func TestListRecipes(t *testing.T) {
	t.Parallel()
	store, _ := seedStates(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(recipeSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"IDEM_STORE": store, "IDEM_SCOPE_SECRET_FILE": secret}
	files, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	files = append(files, filepath.Join("..", "..", "README.md"))
	found := 0
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if !strings.HasPrefix(line, "idem list ") {
				continue
			}
			cmd, _, _ := strings.Cut(line, "#")
			cmd = strings.Join(strings.Fields(cmd), " ")
			want, ok := recipes[cmd]
			if !ok {
				t.Errorf("%s: recipe %q is not in this test's recipes: add it with what it returns", f, cmd)
				continue
			}
			found++
			code, got, errs := listKeys(t, env, strings.Fields(cmd)[2:]...)
			if code != 0 || !slices.Equal(got, want) {
				t.Errorf("%s: %s: %d %v %q, want %v", f, cmd, code, got, errs, want)
			}
		}
		fh.Close()
	}
	if found < len(recipes) {
		t.Errorf("found %d recipes in the docs, want the %d of this test", found, len(recipes))
	}
}
