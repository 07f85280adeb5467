package cli

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestServeOTLPEndpoint: the OTLP endpoint comes from --otlp-endpoint, else
// IDEM_OTLP_ENDPOINT, else the config file's otlp_endpoint.
func TestServeOTLPEndpoint(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "idem.yaml")
	if err := os.WriteFile(file, []byte("upstream: http://127.0.0.1:1\notlp_endpoint: http://file:4318\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, env string
		args      []string
		want      string
	}{
		{"file", "", nil, "http://file:4318"},
		{"env over file", "http://env:4318", nil, "http://env:4318"},
		{"flag over env", "http://env:4318", []string{"--otlp-endpoint", "http://flag:4318"}, "http://flag:4318"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"IDEM_CONFIG": file, "IDEM_OTLP_ENDPOINT": tc.env}
			e := &env{stdout: io.Discard, stderr: io.Discard, getenv: func(k string) string { return vars[k] }}
			fs := newFlags(e, "serve", "")
			f := bindServe(e, fs)
			if err := parse(fs, tc.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := f.resolve(e, fs)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.OTLPEndpoint != tc.want {
				t.Errorf("otlp endpoint %q, want %q", cfg.OTLPEndpoint, tc.want)
			}
		})
	}
}
