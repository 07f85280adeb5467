package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/idemkit/idem/bench/targets"
	"github.com/idemkit/idem/gateway"
	"github.com/idemkit/idem/store/pgstore"
)

// The targets ServeTarget knows.
const (
	TargetNetHTTP     = "nethttp"      // targets.BareHandler
	TargetNetHTTPIdem = "nethttp-idem" // targets.IdemHandler, cache on
	TargetFiber       = "fiber"        // targets.FiberApp(false)
	TargetFiberIdem   = "fiber-idem"   // targets.FiberApp(true)
)

// serveHTTP serves h on listen until ctx ends, then shuts down within 5 seconds.
func serveHTTP(ctx context.Context, listen string, h http.Handler) error {
	return serveHTTPProtocols(ctx, listen, h, false)
}

// serveHTTPProtocols is serveHTTP, also accepting HTTP/2 without TLS when h2c is set.
func serveHTTPProtocols(ctx context.Context, listen string, h http.Handler, h2c bool) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if h2c {
		srv.Protocols = new(http.Protocols)
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// ServeUpstream serves a targets.Upstream answering after delay on listen until ctx ends.
func ServeUpstream(ctx context.Context, listen string, delay time.Duration) error {
	return serveHTTP(ctx, listen, &targets.Upstream{Delay: delay})
}

// ServeBareProxy serves targets.BareProxy to upstream on listen until ctx ends; with h2c,
// clients may also speak HTTP/2 without TLS, as to `idem serve --h2c`.
func ServeBareProxy(ctx context.Context, listen, upstream string, h2c bool) error {
	u, err := url.Parse(upstream)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%w: upstream %q is not a URL", ErrConfig, upstream)
	}
	return serveHTTPProtocols(ctx, listen, targets.BareProxy(u), h2c)
}

// ServeTarget serves one of the middleware comparison's targets (TargetNetHTTP and the
// others) on listen until ctx ends.
//
// With IDEMBENCH_CPUPROFILE_DIR set, the target writes a CPU profile of its whole run to
// DIR/TARGET-PID.prof, for `go tool pprof`.
func ServeTarget(ctx context.Context, listen, target string) error {
	if dir := os.Getenv("IDEMBENCH_CPUPROFILE_DIR"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.prof", target, os.Getpid())))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	switch target {
	case TargetNetHTTP:
		return serveHTTP(ctx, listen, targets.BareHandler())
	case TargetNetHTTPIdem:
		h, err := targets.IdemHandler(10_000)
		if err != nil {
			return err
		}
		return serveHTTP(ctx, listen, h)
	case TargetFiber, TargetFiberIdem:
		app := targets.FiberApp(target == TargetFiberIdem)
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return err
		}
		errc := make(chan error, 1)
		go func() { errc <- app.Listener(ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		return app.ShutdownWithTimeout(5 * time.Second)
	}
	return fmt.Errorf("%w: target %q is not nethttp, nethttp-idem, fiber or fiber-idem", ErrConfig, target)
}

// ServePGGateway runs the gateway (package gateway, as `idem serve` does, with its text logs
// on stderr) in front of upstream on a pgstore opened from storeURL, migrated first. The
// harness uses it for the PostgreSQL figures while `idem serve` cannot open postgres:// URLs.
func ServePGGateway(ctx context.Context, listen, upstream, storeURL string) error {
	st, err := pgstore.Open(ctx, storeURL, pgstore.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	cfg := gateway.Config{Listen: listen, Upstream: upstream, Store: "postgres://(given)", Scope: gateway.ScopeNone}
	g, err := gateway.New(ctx, cfg, gateway.Options{Store: st, Logger: log})
	if err != nil {
		return err
	}
	defer g.Close()
	err = serveHTTP(ctx, listen, g)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
