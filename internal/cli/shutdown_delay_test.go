package cli

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Under Kubernetes (KUBERNETES_SERVICE_HOST set) idem serve keeps serving for 5s after SIGTERM
// unless told otherwise; every way of telling it — the flag, the variable, the config file —
// can set another delay, 0 included.
func TestShutdownDelayUnderKubernetes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(body string) string {
		p := filepath.Join(dir, time.Now().Format("150405.000000000")+".yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	zero, two := file("shutdown_delay: 0s\n"), file("shutdown_delay: 2s\n")
	other := file("ttl: 1h\n")
	for _, tc := range []struct {
		name string
		k8s  bool
		vars map[string]string
		args []string
		want time.Duration
	}{
		{"not in Kubernetes", false, nil, nil, 0},
		{"in Kubernetes", true, nil, nil, 5 * time.Second},
		{"flag 0", true, nil, []string{"--shutdown-delay", "0s"}, 0},
		{"variable 0", true, map[string]string{"IDEM_SHUTDOWN_DELAY": "0s"}, nil, 0},
		{"file 0", true, nil, []string{"--config", zero}, 0},
		{"file 2s", true, nil, []string{"--config", two}, 2 * time.Second},
		{"file without it", true, nil, []string{"--config", other}, 5 * time.Second},
		{"flag over file", true, nil, []string{"--config", two, "--shutdown-delay", "1s"}, time.Second},
	} {
		vars := map[string]string{}
		for k, v := range tc.vars {
			vars[k] = v
		}
		if tc.k8s {
			vars["KUBERNETES_SERVICE_HOST"] = "10.0.0.1"
		}
		e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return vars[k] }}
		fs := newFlags(e, "serve", "")
		f := bindServe(e, fs)
		if _, err := parseInterspersed(fs, tc.args); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		cfg, err := f.resolve(e, fs)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := time.Duration(cfg.ShutdownDelay); got != tc.want {
			t.Errorf("%s: shutdown delay %v, want %v", tc.name, got, tc.want)
		}
	}
}
