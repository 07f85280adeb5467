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

// demoAPIKey is the X-API-Key the demo's curl pair sends: the caller's identity, and so the
// scope value an operator gives inspect and list to find that caller's records.
const demoAPIKey = "sk_test_demo"

func runDemo(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "demo", "[--listen ADDR]")
	listen := fs.String("listen", "127.0.0.1:8080", "address of the gateway (a free port is used if it is taken)")
	consoleListen := fs.String("console-listen", "127.0.0.1:8081", "address of the operator's console (a free port is used if it is taken)")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9090", "address of /metrics (a free port is used if it is taken)")
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

	// Callers are told apart by X-API-Key, hashed under a secret of this run's own, as its
	// store lives only as long as the run; the console's token is this run's own too.
	secret, token := make([]byte, 32), make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	if _, err := rand.Read(token); err != nil {
		return err
	}
	cfg := gateway.Config{
		Listen:        freeOr(*listen),
		Upstream:      "http://" + apiLn.Addr().String(),
		Store:         "sqlite://" + filepath.Join(dir, "idem.db"),
		Lease:         gateway.Duration(10 * time.Second),
		ScopeHeader:   "X-API-Key",
		ScopeSecret:   hex.EncodeToString(secret),
		MetricsListen: freeOr(*metricsListen),
	}.WithDefaults()
	var consoleAddr string
	con := consoleSidecar(freeOr(*consoleListen), hex.EncodeToString(token), "", "", func(a string) { consoleAddr = a }, 0)
	log := newLogger(e.stderr, "text", "info")
	ctx, second, stop := signalContext(ctx)
	defer stop()
	return serve(ctx, second, cfg, log, func(s serveAddrs) {
		u := "http://" + s.addr
		w := e.stdout
		charge := fmt.Sprintf("curl -i %s/v1/charges -H 'X-API-Key: %s' -H 'Idempotency-Key: order-1001' -d '{\"amount\":1000,\"currency\":\"eur\"}'", u, demoAPIKey)
		fmt.Fprintf(w, "\npayments API (knows nothing of idempotency): http://%s\n", apiLn.Addr())
		fmt.Fprintf(w, "idem gateway in front of it:                 %s   (store: %s)\n", u, cfg.Store)
		fmt.Fprintf(w, "operator's console:                          http://%s/   (token: %s)\n", consoleAddr, hex.EncodeToString(token))
		fmt.Fprintf(w, "Prometheus metrics:                          http://%s/metrics\n\n", s.metricsAddr)
		fmt.Fprintf(w, "Charge twice with the same key: one charge, the same answer twice (the second with Idempotent-Replayed: true):\n\n")
		fmt.Fprintf(w, "  %s\n  %s\n\n", charge, charge)
		fmt.Fprintf(w, "Count the charges the API made:   curl %s/v1/charges\n", u)
		fmt.Fprintf(w, "Same key, another amount:         422 (the key is bound to its first request)\n")
		fmt.Fprintf(w, "Second request within %s:        409 with Retry-After (the first is still charging)\n", *delay)
		fmt.Fprintf(w, "Another X-API-Key:                another caller, whose keys are apart from the first's\n\n")
		fmt.Fprintf(w, "The operator's side: the console lists the record (sign in with any user name and the token\n")
		fmt.Fprintf(w, "as the password); inspect and list find it by the caller's X-API-Key, the scope value:\n\n")
		env := "IDEM_SCOPE_SECRET=" + cfg.ScopeSecret
		fmt.Fprintf(w, "  %s idem inspect --store %s --scope-value %s order-1001\n", env, cfg.Store, demoAPIKey)
		fmt.Fprintf(w, "  %s idem list --store %s --scope-value %s\n\n", env, cfg.Store, demoAPIKey)
		fmt.Fprintln(w, "Press Ctrl-C to stop.")
	}, con)
}

// freeOr returns addr if it can be listened on now, else a free port on the loopback.
func freeOr(addr string) string {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "127.0.0.1:0"
	}
	ln.Close()
	return addr
}
