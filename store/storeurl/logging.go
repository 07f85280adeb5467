package storeurl

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/aws/smithy-go/logging"
	"github.com/redis/go-redis/v9"
)

// clientLogger receives the store clients' own log lines; nil: slog.Default().
var clientLogger atomic.Pointer[slog.Logger]

// SetLogger routes the log lines of the store clients (go-redis's, the AWS SDK's) through l,
// so that they come out in the program's format (JSON with --log-format json, say) and obey
// its level, each with a "component" attribute (redis, aws) instead of a plain line on
// standard error. go-redis's logger is process-wide: SetLogger sets it for every Redis client
// of the program, including those opened before the call. DynamoDB stores use the logger set
// when Open created them. A nil l stands for slog.Default().
func SetLogger(l *slog.Logger) {
	clientLogger.Store(l)
	redis.SetLogger(redisLogger{})
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
