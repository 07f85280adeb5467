package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/idemkit/idem/gateway"
	"github.com/idemkit/idem/internal/payments"
)

func init() {
	register("demo", "run a payments API behind the gateway, on embedded SQLite, to try by hand", runDemo)
}

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "demo", "[--listen ADDR]")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the gateway (a free port is used if it is taken)")
	delay := fs.Duration("delay", 2*time.Second, "how long a charge takes, so a quick second request sees 409 in flight")
	if err := parseNoArgs(fs, args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "idem-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	api := payments.New()
	api.Delay = *delay
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	apiSrv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = apiSrv.Serve(apiLn) }()
	defer apiSrv.Close()

	addr := *listen
	if ln, err := net.Listen("tcp", addr); err != nil {
		addr = "127.0.0.1:0"
	} else {
		ln.Close()
	}
	// Callers are told apart by X-API-Key (the curls below send none: one anonymous caller),
	// hashed under a secret of this run's own, as its store lives only as long as the run.
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	cfg := gateway.Config{
		Listen:      addr,
		Upstream:    "http://" + apiLn.Addr().String(),
		Store:       "sqlite://" + filepath.Join(dir, "idem.db"),
		Lease:       gateway.Duration(10 * time.Second),
		ScopeHeader: "X-API-Key",
		ScopeSecret: hex.EncodeToString(secret),
	}.WithDefaults()
	log := newLogger(e.stderr, "text", "info")
	ctx, second, stop := signalContext(ctx)
	defer stop()
	return serve(ctx, second, cfg, log, func(s serveAddrs) {
		gw := s.addr
		u := "http://" + gw
		w := e.stdout
		fmt.Fprintf(w, "\npayments API (knows nothing of idempotency): http://%s\n", apiLn.Addr())
		fmt.Fprintf(w, "idem gateway in front of it:                 %s   (store: %s)\n\n", u, cfg.Store)
		fmt.Fprintf(w, "Charge twice with the same key: one charge, the same answer twice (the second with Idempotent-Replayed: true):\n\n")
		fmt.Fprintf(w, "  curl -i %s/v1/charges -H 'Idempotency-Key: order-1001' -d '{\"amount\":1000,\"currency\":\"eur\"}'\n", u)
		fmt.Fprintf(w, "  curl -i %s/v1/charges -H 'Idempotency-Key: order-1001' -d '{\"amount\":1000,\"currency\":\"eur\"}'\n\n", u)
		fmt.Fprintf(w, "Count the charges the API made:   curl %s/v1/charges\n", u)
		fmt.Fprintf(w, "Same key, another amount:         422 (the key is bound to its first request)\n")
		fmt.Fprintf(w, "Second request within %s:        409 with Retry-After (the first is still charging)\n", *delay)
		fmt.Fprintf(w, "Add -H 'X-API-Key: another':      another caller, whose keys are apart from the first's\n\n")
		fmt.Fprintln(w, "Press Ctrl-C to stop.")
	})
}
