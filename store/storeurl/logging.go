package storeurl

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/aws/smithy-go/logging"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// go-redis's and go-sql-driver/mysql's loggers are process-wide variables (the MySQL driver
// also copies its logger into each DSN's configuration when it parses one), so they are set
// once, here, to forwarders that read clientLogger when they log: SetLogger then writes only
// that atomic pointer, and never races with a client that logs or a store that opens.
func init() {
	redis.SetLogger(redisLogger{})
	_ = mysql.SetLogger(mysqlLogger{})
}

// clientLogger receives the store clients' own log lines; nil: slog.Default().
var clientLogger atomic.Pointer[slog.Logger]

// SetLogger routes the log lines of the store clients (go-redis's, go-sql-driver/mysql's, the
// AWS SDK's) through l, so that they come out in the program's format (JSON with --log-format
// json, say) and obey its level, each with a "component" attribute (redis, mysql, aws) instead
// of a plain line on standard error. The logger is process-wide: SetLogger sets it for every
// client of the program, including those opened before the call (until it is called, their
// lines go through slog.Default()), and a later call takes over from it. It is safe to call
// at any time, from any goroutine. A nil l stands for slog.Default().
func SetLogger(l *slog.Logger) {
	clientLogger.Store(l)
}

func currentLogger() *slog.Logger {
	if l := clientLogger.Load(); l != nil {
		return l
	}
	return slog.Default()
}

// redisLogger is go-redis's Logging interface over slog. go-redis logs what went wrong (a
// failed dial, a connection it could not close, a value it had to round): at Warn.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l := currentLogger()
	if !l.Enabled(ctx, slog.LevelWarn) {
		return
	}
	l.Log(ctx, slog.LevelWarn, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "redis")
}

// mysqlLogger is go-sql-driver/mysql's logger over slog. The driver logs what went wrong on a
// connection (an unexpected EOF, a bad idle connection it closed): at Warn.
type mysqlLogger struct{}

func (mysqlLogger) Print(v ...any) {
	l := currentLogger()
	if !l.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	l.Log(context.Background(), slog.LevelWarn, strings.TrimSpace(fmt.Sprint(v...)), "component", "mysql")
}

// awsLogger is the AWS SDK's logger over slog: its DEBUG lines (the request and retry
// logging that the client's log mode turns on) at Debug, its WARN lines at Warn.
type awsLogger struct{}

func (awsLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelWarn
	if c == logging.Debug {
		level = slog.LevelDebug
	}
	l := currentLogger()
	if !l.Enabled(context.Background(), level) {
		return
	}
	l.Log(context.Background(), level, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "aws")
}
