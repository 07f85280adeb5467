package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/idemkit/idem/gateway"
	"github.com/idemkit/idem/internal/console"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func init() {
	register("console", "serve the operator's web console for a store (records, release); off unless a token is given", runConsole)
}

// consoleFlags are the console's flags on `idem serve`: off unless --console-listen is given.
type consoleFlags struct {
	listen    string            // the config's ConsoleListen, once resolved
	tokenFile string            // the config's ConsoleTokenFile, once resolved
	ready     func(addr string) // tests: called with the console's address once it listens
	rateStep  time.Duration     // tests: how often rates are read (0: the console's default)
}

// bind adds the console's flags to serve's flag set, into c.
func (f *consoleFlags) bind(e *env, fs *flag.FlagSet, c *gateway.Config) {
	fs.StringVar(&c.ConsoleListen, "console-listen", e.getenv("IDEM_CONSOLE_LISTEN"), "serve the operator's web console on this address, such as 127.0.0.1:8081; it needs IDEM_CONSOLE_TOKEN (or --console-token-file, or IDEM_CONSOLE_USER and IDEM_CONSOLE_PASSWORD) (default: none) (env IDEM_CONSOLE_LISTEN)")
	fs.StringVar(&c.ConsoleTokenFile, "console-token-file", e.getenv("IDEM_CONSOLE_TOKEN_FILE"), "file holding the console's token, at least 16 bytes (a trailing newline is ignored); or set IDEM_CONSOLE_TOKEN (env IDEM_CONSOLE_TOKEN_FILE)")
}

// consoleCredentials returns the console's credential: a token from the file or
// IDEM_CONSOLE_TOKEN, and/or basic credentials from IDEM_CONSOLE_USER and IDEM_CONSOLE_PASSWORD.
// Without one, with a user but no password (or a password but no user), or with a weak token
// or password (console.CheckSecret), it fails with an error naming the variable: the console
// never runs open, nor behind a guessable secret.
func consoleCredentials(e *env, tokenFile string) (token, user, password string, err error) {
	if err := renamedVars(e); err != nil {
		return "", "", "", err
	}
	token = e.getenv("IDEM_CONSOLE_TOKEN")
	tokenName := "IDEM_CONSOLE_TOKEN"
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return "", "", "", fmt.Errorf("console token file: %w", err)
		}
		token = strings.TrimRight(string(b), "\r\n")
		tokenName = "the console token file " + tokenFile
	}
	user, password = e.getenv("IDEM_CONSOLE_USER"), e.getenv("IDEM_CONSOLE_PASSWORD")
	switch {
	case token == "" && user == "" && password == "":
		return "", "", "", usageError("the console needs a credential: set IDEM_CONSOLE_TOKEN, give a token file, or set IDEM_CONSOLE_USER and IDEM_CONSOLE_PASSWORD")
	case user != "" && password == "":
		return "", "", "", usageError("IDEM_CONSOLE_USER is set but IDEM_CONSOLE_PASSWORD is empty: the console never lets a user in without a password; set a strong IDEM_CONSOLE_PASSWORD or unset IDEM_CONSOLE_USER")
	case user == "" && password != "":
		return "", "", "", usageError("IDEM_CONSOLE_PASSWORD is set but IDEM_CONSOLE_USER is empty: set both, or neither")
	}
	if token != "" {
		if err := console.CheckSecret(token); err != nil {
			return "", "", "", usageError("the console's token (%s) %v", tokenName, err)
		}
	}
	if password != "" {
		if err := console.CheckSecret(password); err != nil {
			return "", "", "", usageError("IDEM_CONSOLE_PASSWORD %v", err)
		}
	}
	return token, user, password, nil
}

// sidecar starts something beside the gateway once it is built, and returns how to stop it.
type sidecar func(g *gateway.Gateway, cfg gateway.Config, log *slog.Logger) (stop func(), err error)

// sidecar returns the console's sidecar for serve, or nil when --console-listen is not given.
func (f *consoleFlags) sidecar(e *env) (sidecar, error) {
	if err := renamedVars(e); err != nil {
		return nil, err
	}
	if f.listen == "" {
		return nil, nil
	}
	token, user, password, err := consoleCredentials(e, f.tokenFile)
	if err != nil {
		return nil, err
	}
	return consoleSidecar(f.listen, token, user, password, f.ready, f.rateStep), nil
}

// consoleSidecar returns the sidecar that serves the console for the gateway's store on
// listen, with these credentials (already checked), calling ready with its address.
func consoleSidecar(listen, token, user, password string, ready func(string), rateStep time.Duration) sidecar {
	return func(g *gateway.Gateway, cfg gateway.Config, log *slog.Logger) (func(), error) {
		secret, err := scopeSecret(cfg)
		if err != nil {
			return nil, err
		}
		hidden := []string{cfg.ScopeHeader}
		for _, r := range cfg.Routes {
			hidden = append(hidden, r.ScopeHeader, r.KeyHeader)
		}
		c, err := console.New(console.Options{
			Store: g.Store(), Token: token, User: user, Password: password, Rates: gatewayRates(g.Metrics().Requests),
			ScopeSecret: secret, HiddenHeaders: hidden, StoreName: redact(cfg.Store), Logger: log, RateStep: rateStep,
		})
		if err != nil {
			return nil, err
		}
		return startConsole(c, listen, log, ready)
	}
}

// startConsole serves c on addr until the returned func is called.
func startConsole(c *console.Console, addr string, log *slog.Logger, ready func(string)) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("console: %w", err)
	}
	srv := &http.Server{
		Handler: c, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 90 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("console stopped", "err", err)
		}
	}()
	a := ln.Addr().String()
	log.Info("console listening", "addr", "http://"+a)
	if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		log.Warn("the console listens beyond this machine: serve it behind TLS, or bind it to 127.0.0.1 and reach it over SSH", "addr", a)
	}
	if ready != nil {
		ready(a)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		c.Close()
	}, nil
}

// scopeSecret is the gateway's scope secret from cfg, or nil without one.
func scopeSecret(cfg gateway.Config) ([]byte, error) {
	if cfg.ScopeSecretFile != "" {
		b, err := os.ReadFile(cfg.ScopeSecretFile)
		if err != nil {
			return nil, fmt.Errorf("scope secret file: %w", err)
		}
		return []byte(strings.TrimRight(string(b), "\r\n")), nil
	}
	if cfg.ScopeSecret != "" {
		return []byte(cfg.ScopeSecret), nil
	}
	return nil, nil
}

// gatewayRates reads the gateway's request counter by outcome, for the console's chart.
func gatewayRates(requests *prometheus.CounterVec) func() map[string]float64 {
	return func() map[string]float64 {
		ch := make(chan prometheus.Metric, 32)
		go func() {
			requests.Collect(ch)
			close(ch)
		}()
		out := map[string]float64{}
		for m := range ch {
			var d dto.Metric
			if m.Write(&d) != nil || d.Counter == nil {
				continue
			}
			for _, l := range d.Label {
				if l.GetName() == "outcome" {
					out[l.GetValue()] += d.Counter.GetValue()
				}
			}
		}
		return out
	}
}

func runConsole(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "console", "[--store URL] [--listen ADDR] [--token-file FILE] [--scope-secret-file FILE]")
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprintln(e.stderr, `
The console lists the store's records (search by state, age, client key and tenant), shows a
record's stored response, and releases a stuck key after a confirmation, under the rules of
idem release. It needs a credential: IDEM_CONSOLE_TOKEN, --token-file, or IDEM_CONSOLE_USER and
IDEM_CONSOLE_PASSWORD; a browser sends the token as the password of its login prompt. Request
rates need the console of a running gateway: idem serve --console-listen ADDR.`)
	}
	store := storeFlag(e, fs)
	listen := fs.String("listen", cmp.Or(e.getenv("IDEM_CONSOLE_LISTEN"), "127.0.0.1:8081"), "address to serve the console on (env IDEM_CONSOLE_LISTEN)")
	tokenFile := fs.String("token-file", e.getenv("IDEM_CONSOLE_TOKEN_FILE"), "file holding the console's token, at least 16 bytes; or set IDEM_CONSOLE_TOKEN (env IDEM_CONSOLE_TOKEN_FILE)")
	secretFile := fs.String("scope-secret-file", e.getenv("IDEM_SCOPE_SECRET_FILE"), "the gateway's scope secret, to find a tenant by its identity (or set IDEM_SCOPE_SECRET) (env IDEM_SCOPE_SECRET_FILE)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError("unexpected arguments: %v", fs.Args())
	}
	token, user, password, err := consoleCredentials(e, *tokenFile)
	if err != nil {
		return err
	}
	secret, err := scopeSecret(gateway.Config{ScopeSecret: e.getenv("IDEM_SCOPE_SECRET"), ScopeSecretFile: *secretFile})
	if err != nil {
		return err
	}
	log := newLogger(e.stderr, "text", "info")
	st, err := openStoreLogging(ctx, *store, log)
	if err != nil {
		return err
	}
	defer st.Close()
	c, err := console.New(console.Options{
		Store: st, Token: token, User: user, Password: password, ScopeSecret: secret, StoreName: redact(*store), Logger: log,
	})
	if err != nil {
		return err
	}
	ctx, _, stopSignals := signalContext(ctx)
	defer stopSignals()
	stop, err := startConsole(c, *listen, log, nil)
	if err != nil {
		return err
	}
	<-ctx.Done()
	stop()
	return nil
}

// renamed maps the console's former names (flags, variables, the command) to their names: a
// former name is refused with an error naming the new one, so that a configuration written
// for it does not silently run without its console.
var renamed = map[string]string{
	"admin-listen":          "console-listen",
	"admin-token-file":      "console-token-file",
	"IDEM_ADMIN_LISTEN":     "IDEM_CONSOLE_LISTEN",
	"IDEM_ADMIN_TOKEN_FILE": "IDEM_CONSOLE_TOKEN_FILE",
	"IDEM_ADMIN_TOKEN":      "IDEM_CONSOLE_TOKEN",
	"IDEM_ADMIN_USER":       "IDEM_CONSOLE_USER",
	"IDEM_ADMIN_PASSWORD":   "IDEM_CONSOLE_PASSWORD",
	"admin":                 "console",
}

// renamedVars fails if a former name of a console variable is set.
func renamedVars(e *env) error {
	for _, old := range []string{"IDEM_ADMIN_LISTEN", "IDEM_ADMIN_TOKEN_FILE", "IDEM_ADMIN_TOKEN", "IDEM_ADMIN_USER", "IDEM_ADMIN_PASSWORD"} {
		if e.getenv(old) != "" {
			return usageError("%s is now %s: rename it", old, renamed[old])
		}
	}
	return nil
}

// renamedFlag returns the error for a former flag name among args, or nil.
func renamedFlag(args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && renamed[name] != "" && name != "admin" {
			return usageError("--%s is now --%s", name, renamed[name])
		}
	}
	return nil
}
