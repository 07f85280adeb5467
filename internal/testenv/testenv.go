// Package testenv finds the services integration tests need.
//
// A test asks for a service by its environment variable and default address. If the service
// cannot be reached the test is skipped with a message naming the variable, or fails when
// IDEM_REQUIRE_SERVICES=1 (as in CI): a missing service is then a failure, never a skip.
package testenv

import (
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// Required reports whether IDEM_REQUIRE_SERVICES=1 is set.
func Required() bool { return os.Getenv("IDEM_REQUIRE_SERVICES") == "1" }

// Service returns the value of the environment variable env, or def when it is unset, after
// checking that addr(value) accepts TCP connections. On failure it skips t, or fails it when
// services are required.
func Service(t testing.TB, name, env, def string, addr func(string) string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		v = def
	}
	a := addr(v)
	c, err := net.DialTimeout("tcp", a, 2*time.Second)
	if err != nil {
		Missing(t, "%s is not reachable at %s (%v); set %s or run `make services`", name, a, err, env)
		return ""
	}
	c.Close()
	return v
}

// Missing skips t with the message, or fails it when services are required.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf("IDEM_REQUIRE_SERVICES=1: "+format, args...)
	}
	t.Skipf(format, args...)
}

// HostPort returns the host:port of a URL such as postgres://user@host:port/db, or the value
// itself when it is already host:port.
func HostPort(defPort string) func(string) string {
	return func(v string) string {
		if u, err := url.Parse(v); err == nil && u.Host != "" {
			if u.Port() == "" {
				return net.JoinHostPort(u.Hostname(), defPort)
			}
			return u.Host
		}
		return v
	}
}

// PostgresURL returns IDEM_POSTGRES_URL (default the local server, database test).
func PostgresURL(t testing.TB) string {
	return Service(t, "PostgreSQL", "IDEM_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", HostPort("5432"))
}

// MySQLDSN returns IDEM_MYSQL_URL as a go-sql-driver DSN (default root@tcp(127.0.0.1:3306)/test).
func MySQLDSN(t testing.TB) string {
	return Service(t, "MySQL/MariaDB", "IDEM_MYSQL_URL", "root@tcp(127.0.0.1:3306)/test", func(v string) string {
		// user@tcp(host:port)/db
		if i, j := indexOf(v, "tcp("), indexOf(v, ")"); i >= 0 && j > i {
			return v[i+4 : j]
		}
		return HostPort("3306")(v)
	})
}

// RedisAddr returns IDEM_REDIS_ADDR (default 127.0.0.1:6379).
func RedisAddr(t testing.TB) string {
	return Service(t, "Redis", "IDEM_REDIS_ADDR", "127.0.0.1:6379", HostPort("6379"))
}

// NATSURL returns IDEM_NATS_URL (default nats://127.0.0.1:4222).
func NATSURL(t testing.TB) string {
	return Service(t, "NATS", "IDEM_NATS_URL", "nats://127.0.0.1:4222", HostPort("4222"))
}

// AMQPURL returns IDEM_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/).
func AMQPURL(t testing.TB) string {
	return Service(t, "RabbitMQ", "IDEM_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/", HostPort("5672"))
}

func indexOf(s, sub string) int { return strings.Index(s, sub) }
