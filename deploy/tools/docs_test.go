package tools

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/idemkit/idem/gateway"
)

// docBlock is one fenced block of a Markdown file.
type docBlock struct {
	file, info, code string
	line             int
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

func docBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	var cur *docBlock
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &docBlock{file: filepath.Base(path), info: strings.TrimSpace(strings.TrimPrefix(trimmed, "```")), line: n + 1}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code += line + "\n"
		}
	}
	return out
}

var (
	idemBinOnce sync.Once
	idemBin     string
	idemBinErr  error
)

// idemBinary builds cmd/idem once for the tests that run it.
func idemBinary(t *testing.T) string {
	t.Helper()
	idemBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "idem-deploy-test")
		if err != nil {
			idemBinErr = err
			return
		}
		idemBin = filepath.Join(dir, "idem")
		cmd := exec.Command("go", "build", "-o", idemBin, "./cmd/idem")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			idemBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if idemBinErr != nil {
		t.Fatal(idemBinErr)
	}
	return idemBin
}

var (
	idemCall = regexp.MustCompile(`(?:^|[\s;&|(])idem ([a-z]+)((?: +[^;&|)]*)?)`)
	longFlag = regexp.MustCompile(`(?:^|\s)--([a-z0-9-]+)`)
)

// checkShell checks a shell block: every idem command names a real subcommand and only flags
// it has (from its own -h), and every helm command installs the chart of this repository.
func checkShell(t *testing.T, b docBlock) {
	t.Helper()
	code := strings.ReplaceAll(b.code, "\\\n", " ")
	for _, line := range strings.Split(code, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for _, m := range idemCall.FindAllStringSubmatch(line, -1) {
			help, _ := exec.Command(idemBinary(t), m[1], "-h").CombinedOutput()
			if !bytes.Contains(help, []byte("Usage")) && !bytes.Contains(help, []byte("usage")) {
				t.Errorf("%s: idem %s: not a subcommand:\n%s", b, m[1], help)
				continue
			}
			for _, f := range longFlag.FindAllStringSubmatch(m[2], -1) {
				if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(f[1]) + `\b`).Match(help) {
					t.Errorf("%s: idem %s has no flag --%s", b, m[1], f[1])
				}
			}
		}
		if strings.HasPrefix(line, "helm ") && !strings.Contains(line, " deploy/helm/idem") {
			t.Errorf("%s: %q does not use the chart in deploy/helm/idem", b, line)
		}
		for _, f := range regexp.MustCompile(`\s(deploy/[^\s]+)`).FindAllStringSubmatch(line, -1) {
			if _, err := os.Stat(filepath.Join("../..", f[1])); err != nil {
				t.Errorf("%s: %s does not exist", b, f[1])
			}
		}
	}
}

// checkDropIn runs systemd-analyze verify on the unit with the block as a drop-in.
func checkDropIn(t *testing.T, b docBlock) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("IDEM_REQUIRE_SERVICES") == "1" {
			t.Fatal("systemd-analyze is not installed")
		}
		t.Logf("%s: systemd-analyze is not installed: the drop-in is not verified", b)
		return
	}
	dir := t.TempDir()
	unit, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit = bytes.ReplaceAll(unit, []byte("/usr/local/bin/idem"), []byte(idemBinary(t)))
	if err := os.WriteFile(filepath.Join(dir, "idem.service"), unit, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "idem.service.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "idem.service.d", "doc.conf"), []byte(b.code), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", filepath.Join(dir, "idem.service")).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("%s: systemd-analyze verify with the drop-in: %v\n%s", b, err, out)
	}
	if !strings.Contains(b.code, "[Service]") {
		t.Errorf("%s: a drop-in without a [Service] section", b)
	}
}

// checkValues renders the chart with the block as its values file and checks the result as
// the chart tests check their own variants.
func checkValues(t *testing.T, b docBlock) {
	t.Helper()
	v, err := chartutil.ReadValues([]byte(b.code))
	if err != nil {
		t.Errorf("%s: values do not load: %v", b, err)
		return
	}
	out, err := render(v.AsMap())
	if err != nil {
		t.Errorf("%s: helm template with these values: %v", b, err)
		return
	}
	for _, m := range parseManifests(t, out) {
		if err := validate(m); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
	r := renderVariant(t, v.AsMap())
	if err := r.cfg.Validate(); err != nil {
		t.Errorf("%s: the gateway's config from these values: %v", b, err)
	}
}

// TestDeployDocBlocks checks every block of docs/deploy.md and docs/runbook.md: values blocks
// (yaml values) render the chart into valid manifests, drop-ins (ini) pass systemd-analyze
// verify with the unit, shell blocks name real idem subcommands and flags and this chart, and
// configuration blocks (yaml) load in the gateway, as the repository's documentation test
// also checks.
func TestDeployDocBlocks(t *testing.T) {
	t.Parallel()
	seen := map[string]int{}
	for _, doc := range []string{"../../docs/deploy.md", "../../docs/runbook.md"} {
		for _, b := range docBlocks(t, doc) {
			seen[b.info]++
			switch b.info {
			case "sh":
				checkShell(t, b)
			case "yaml values":
				checkValues(t, b)
			case "ini":
				checkDropIn(t, b)
			case "yaml":
				c, err := gateway.Parse([]byte(b.code))
				if err == nil {
					err = c.WithDefaults().Validate()
				}
				if err != nil {
					t.Errorf("%s: %v", b, err)
				}
			default:
				t.Errorf("%s: a block of kind %q, which no test checks", b, b.info)
			}
		}
	}
	for _, kind := range []string{"sh", "yaml values", "ini", "yaml"} {
		if seen[kind] == 0 {
			t.Errorf("no %q block found", kind)
		}
	}
	t.Logf("blocks checked: %v", seen)
}
