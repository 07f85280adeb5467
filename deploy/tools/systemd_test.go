package tools

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/gateway"
)

const (
	unitFile       = "../systemd/idem.service"
	unitConfigFile = "../systemd/config.yaml"
)

// unitSettings reads a unit file's Key=Value lines (the last one of a key wins, as systemd
// reads those that take one value).
func unitSettings(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not Key=Value", path, line)
		}
		out[k] = v
	}
	return out
}

// TestSystemdUnitHardening checks the unit's hardening and that systemd gives the gateway
// the time its drain may take: TimeoutStopSec above shutdown_delay + shutdown_timeout of
// the configuration the unit runs, as the gateway reads it, plus the 5s abort after it.
func TestSystemdUnitHardening(t *testing.T) {
	t.Parallel()
	u := unitSettings(t, unitFile)
	for k, want := range map[string]string{
		"DynamicUser": "yes", "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
		"PrivateTmp": "yes", "StateDirectory": "idem", "WorkingDirectory": "%S/idem",
		"EnvironmentFile": "/etc/idem/idem.env", "CapabilityBoundingSet": "", "KillSignal": "SIGTERM",
	} {
		if got, ok := u[k]; !ok || got != want {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	if !strings.Contains(u["ExecStart"], " serve --config "+"/etc/idem/config.yaml") {
		t.Errorf("ExecStart=%s does not run idem serve on /etc/idem/config.yaml", u["ExecStart"])
	}
	cfg, err := gateway.LoadFile(unitConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ScopeSecret = "0123456789abcdef0123456789abcdef" // IDEM_SCOPE_SECRET, from the EnvironmentFile
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%s: %v", unitConfigFile, err)
	}
	if cfg.Store != "sqlite://./idem.db" {
		t.Errorf("store %q: the unit's config leaves the store to IDEM_STORE or the SQLite default in the state directory", cfg.Store)
	}
	stop, err := strconv.Atoi(u["TimeoutStopSec"])
	if err != nil {
		t.Fatalf("TimeoutStopSec=%q: %v", u["TimeoutStopSec"], err)
	}
	need := time.Duration(cfg.ShutdownDelay) + time.Duration(cfg.ShutdownTimeout) + 5*time.Second
	if time.Duration(stop)*time.Second <= need {
		t.Errorf("TimeoutStopSec=%d does not exceed shutdown_delay + shutdown_timeout + the 5s abort = %s", stop, need)
	}
}

// TestSystemdUnitVerifies runs systemd-analyze verify on the unit, with its ExecStart pointed
// at a built idem: any complaint (an unknown key, a value systemd ignores) fails.
func TestSystemdUnitVerifies(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
			t.Fatal("systemd-analyze is not installed (Debian's systemd package)")
		}
		t.Skip("systemd-analyze is not installed (Debian's systemd package)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "idem")
	build := exec.Command("go", "build", "-o", bin, "./cmd/idem")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit = bytes.ReplaceAll(unit, []byte("/usr/local/bin/idem"), []byte(bin))
	path := filepath.Join(dir, "idem.service")
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", path)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, stderr.String())
	}
}
