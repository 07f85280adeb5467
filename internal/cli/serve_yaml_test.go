package cli

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/idemkit/idem/gateway"
)

// Every flag of idem serve (but --config itself) is a key of the YAML config file: the flag's
// name with underscores.
func TestServeFlagsAreYAMLKeys(t *testing.T) {
	t.Parallel()
	keys := map[string]bool{}
	ct := reflect.TypeOf(gateway.Config{})
	for i := range ct.NumField() {
		if k, _, _ := strings.Cut(ct.Field(i).Tag.Get("yaml"), ","); k != "" {
			keys[k] = true
		}
	}
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	fs := newFlags(e, "serve", "")
	bindServe(e, fs)
	fs.VisitAll(func(f *flag.Flag) {
		if k := strings.ReplaceAll(f.Name, "-", "_"); f.Name != "config" && !keys[k] {
			t.Errorf("idem serve --%s has no YAML key %q", f.Name, k)
		}
	})
}

// The console's address and token file come from the config file too, and a flag's former
// name, or a variable's, is refused with its new name.
func TestConsoleConfigKeys(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "idem.yaml")
	if err := os.WriteFile(cfg, []byte("console_listen: 127.0.0.1:0\nconsole_token_file: "+filepath.Join(dir, "token")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	fs := newFlags(e, "serve", "")
	f := bindServe(e, fs)
	if err := parse(fs, []string{"--config", cfg}); err != nil {
		t.Fatal(err)
	}
	c, err := f.resolve(e, fs)
	if err != nil || c.ConsoleListen != "127.0.0.1:0" || c.ConsoleTokenFile != filepath.Join(dir, "token") {
		t.Fatalf("resolve: %+v, %v; want the console's keys from the file", c, err)
	}
	for _, tc := range []struct {
		vars map[string]string
		args []string
		want string
	}{
		{nil, []string{"serve", "--admin-listen", "127.0.0.1:0"}, "--admin-listen is now --console-listen"},
		{nil, []string{"serve", "--admin-token-file=x"}, "--admin-token-file is now --console-token-file"},
		{nil, []string{"admin", "--store", "memory://"}, `"admin" is now "console"`},
		{map[string]string{"IDEM_ADMIN_TOKEN": "0123456789abcdef0123"}, []string{"console", "--store", "memory://", "--listen", "127.0.0.1:0"}, "IDEM_ADMIN_TOKEN is now IDEM_CONSOLE_TOKEN"},
	} {
		code, _, errs := runEnv(t, tc.vars, tc.args...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("idem %s: %d %q, want exit 2 and %q", strings.Join(tc.args, " "), code, errs, tc.want)
		}
	}
}
