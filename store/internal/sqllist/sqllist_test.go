package sqllist_test

import (
	"reflect"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/sqllist"
	"github.com/idemkit/idem/store/storekit"
)

func TestQueryNumbersEveryBound(t *testing.T) {
	d := sqllist.Dialect{Key: "k", Head: func(n int) string { return "h" }, Param: sqllist.Dollar, Starts: "starts"}
	b := storekit.ListBounds{Limit: 10, From: "a", To: "b", HasAfter: true, After: "a1", State: idem.StateCompleted, CreatedBefore: 99}
	q, args := sqllist.Query(d, "t", b)
	want := "SELECT k, fingerprint, state, token, lease_until, attempts, h, created_at, completed_at, expires_at, route, starts FROM t" +
		" WHERE k >= $1 AND k < $2 AND k > $3 AND state = $4 AND created_at < $5 ORDER BY k LIMIT $6"
	if q != want {
		t.Fatalf("query\n got %s\nwant %s", q, want)
	}
	if wantArgs := []any{"a", "b", "a1", int64(idem.StateCompleted), int64(99), 11}; !reflect.DeepEqual(args, wantArgs) {
		t.Fatalf("args %v, want %v", args, wantArgs)
	}
}

func TestQueryUnboundedPrefix(t *testing.T) {
	d := sqllist.Dialect{Key: "`key`", Head: func(n int) string { return "h" }, Param: sqllist.Question,
		KeyArg: func(k string) any { return []byte(k) }}
	q, args := sqllist.Query(d, "t", storekit.ListBounds{Limit: 1})
	want := "SELECT `key`, fingerprint, state, token, lease_until, attempts, h, created_at, completed_at, expires_at, route, 0 FROM t" +
		" WHERE `key` >= ? ORDER BY `key` LIMIT ?"
	if q != want {
		t.Fatalf("query\n got %s\nwant %s", q, want)
	}
	if wantArgs := []any{[]byte{}, 2}; !reflect.DeepEqual(args, wantArgs) {
		t.Fatalf("args %#v, want %#v", args, wantArgs)
	}
}
