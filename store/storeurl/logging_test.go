package storeurl

import (
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/syncbuf"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/redis/go-redis/v9"
)

// syncBuffer is a log destination safe for the clients' goroutines, which reads back JSON
// records.
type syncBuffer struct{ syncbuf.Buffer }

// records returns the JSON records written, failing on any line that is not one.
func (s *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a plain line in the JSON log: %q", line)
			continue
		}
		out = append(out, rec)
	}
	return out
}

// TestClientLogsThroughSlog: go-redis's, the MySQL driver's and the AWS SDK's log lines come out as records of
// the logger given to SetLogger, with their component, and nothing else is written.
func TestClientLogsThroughSlog(t *testing.T) {
	var buf syncBuffer
	SetLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { SetLogger(nil) })

	// go-redis: a sub-millisecond expiry is rounded with a log line, and the dial to an
	// address where nothing listens fails with another.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	rc := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	_ = rc.Set(context.Background(), "k", "v", 500*time.Microsecond).Err()
	rc.Close()

	// The AWS SDK, set up as openDynamoDB does, with retry logging on: a server answering 500.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	client := dynamostore.LocalClient(srv.URL, nil, func(o *dynamodb.Options) {
		o.Logger = awsLogger{}
		o.ClientLogMode = aws.LogRetries
		o.RetryMaxAttempts = 2
	})
	_, _ = client.ListTables(context.Background(), &dynamodb.ListTablesInput{})

	// go-sql-driver/mysql: a server that closes the connection before its greeting.
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mln.Close() })
	go func() {
		for {
			c, err := mln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	db, err := sql.Open("mysql", "root@tcp("+mln.Addr().String()+")/test?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Ping()
	db.Close()

	seen := map[string]int{}
	for _, rec := range buf.records(t) {
		c, _ := rec["component"].(string)
		seen[c]++
		if msg, _ := rec["msg"].(string); msg == "" {
			t.Errorf("record without a message: %v", rec)
		}
	}
	if seen["redis"] == 0 || seen["aws"] == 0 || seen["mysql"] == 0 {
		t.Errorf("records by component %v, want some from redis, mysql and aws", seen)
	}
}

// TestOpenDynamoDBLogger: the DynamoDB clients Open makes log through SetLogger's logger,
// with an endpoint or with the SDK's default configuration.
func TestOpenDynamoDBLogger(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "x")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "x")
	t.Setenv("AWS_CONFIG_FILE", "/dev/null")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
	for _, raw := range []string{"dynamodb://t?endpoint=http://127.0.0.1:1", "dynamodb://t?region=eu-west-1"} {
		st, err := Open(context.Background(), raw)
		if err != nil {
			t.Fatal(err)
		}
		ds, ok := st.(*dynamostore.Store)
		if !ok {
			t.Fatalf("%s opened a %T", raw, st)
		}
		c, ok := ds.Options().Client.(*dynamodb.Client)
		if !ok {
			t.Fatalf("%s: a %T client", raw, ds.Options().Client)
		}
		if lg := c.Options().Logger; lg != (awsLogger{}) {
			t.Errorf("%s: the client logs to a %T", raw, lg)
		}
		st.Close()
	}
}
