package cli

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// logFlushEvery bounds how long an info line (one per processed request) waits in the
// gateway's log buffer.
const logFlushEvery = 100 * time.Millisecond

// logBuffer batches the gateway's log output: a line per processed request written to a file
// or a pipe one at a time costs a system call each, a few percent of a request's CPU. Lines
// wait at most logFlushEvery; a line at warn or above is written at once, with the lines
// before it (flushHandler); everything is written at exit.
type logBuffer struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func newLogBuffer(w io.Writer) *logBuffer { return &logBuffer{w: bufio.NewWriterSize(w, 32<<10)} }

// Write buffers p; it is safe for concurrent use.
func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

// Flush writes what is buffered.
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Flush()
}

// start flushes every logFlushEvery until the returned func is called, which flushes a last
// time.
func (b *logBuffer) start() (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(logFlushEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = b.Flush()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		_ = b.Flush()
	}
}

// flushHandler writes a record at warn or above, and what was buffered before it, at once.
type flushHandler struct {
	slog.Handler
	buf *logBuffer
}

func (h flushHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		if ferr := h.buf.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func (h flushHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return flushHandler{h.Handler.WithAttrs(attrs), h.buf}
}

func (h flushHandler) WithGroup(name string) slog.Handler {
	return flushHandler{h.Handler.WithGroup(name), h.buf}
}
