package tools

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// consoleWiring is what a rendered variant says about the console: the config's address and
// token file, the container's and the Service's console ports, and the Secret key mounted at
// the token file (Secret name, key).
type consoleWiring struct {
	listen, tokenFile   string
	containerPort       int32
	servicePort         int32
	secretName, secretK string
}

func consoleOf(t *testing.T, r rendered) consoleWiring {
	t.Helper()
	w := consoleWiring{listen: r.raw.ConsoleListen, tokenFile: r.raw.ConsoleTokenFile}
	for _, p := range r.idem.Ports {
		if p.Name == "console" {
			w.containerPort = p.ContainerPort
		}
	}
	var svc corev1.Service
	into(t, r.ms.find("Service", ""), &svc)
	for _, p := range svc.Spec.Ports {
		if p.Name == "console" {
			if p.TargetPort.String() != "console" {
				t.Errorf("the Service's console port targets %s, want the container's console port", p.TargetPort.String())
			}
			w.servicePort = p.Port
		}
	}
	for _, m := range r.idem.VolumeMounts {
		for _, v := range r.deploy.Spec.Template.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				if filepath.Join(m.MountPath, it.Path) == w.tokenFile && w.tokenFile != "" {
					w.secretName, w.secretK = v.Secret.SecretName, it.Key
				}
			}
		}
	}
	return w
}

// TestChartConsole checks the console option: off by default (no listener, port or token);
// on, the gateway's config names a console address whose port is the container's console
// port and a token file that is a mounted Secret key (the release's own Secret from
// console.token, or console.existingSecret); the Service gets a console port only with
// console.service, and the console listens beyond the pod's loopback only then.
func TestChartConsole(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"standalone", "sidecar", "servicemonitor", "existing-secret"} {
		w := consoleOf(t, renderVariant(t, readValues(t, name)))
		if w != (consoleWiring{}) {
			t.Errorf("%s: a console without console.enabled: %+v", name, w)
		}
	}
	for _, tc := range []struct {
		name       string
		vals       map[string]any
		wantListen string
		wantSvc    int32
		wantSecret string
		wantKey    string
	}{
		{"existing secret, on the Service", readValues(t, "console"), "0.0.0.0:8081", 8081, "idem-console", "token"},
		{"token given, loopback only",
			set(set(set(readValues(t, "standalone"), "console.enabled", true), "console.token", "fedcba9876543210fedcba9876543210"), "console.port", 9443),
			"127.0.0.1:9443", 0, "RELEASE-console", "console-token"},
	} {
		r := renderVariant(t, tc.vals)
		w := consoleOf(t, r)
		_, port, _ := net.SplitHostPort(w.listen)
		if w.listen != tc.wantListen || port != strconv.Itoa(int(w.containerPort)) {
			t.Errorf("%s: console_listen %q, container port %d; want %s on the container's console port", tc.name, w.listen, w.containerPort, tc.wantListen)
		}
		if w.servicePort != tc.wantSvc {
			t.Errorf("%s: Service console port %d, want %d", tc.name, w.servicePort, tc.wantSvc)
		}
		wantSecret := strings.ReplaceAll(tc.wantSecret, "RELEASE", "idem")
		if w.secretName != wantSecret || w.secretK != tc.wantKey {
			t.Errorf("%s: console_token_file %q is Secret %q key %q, want Secret %q key %q", tc.name, w.tokenFile, w.secretName, w.secretK, wantSecret, tc.wantKey)
		}
		if sec := r.ms.find("Secret", wantSecret); sec != nil {
			var s corev1.Secret
			into(t, sec, &s)
			if len(s.StringData[tc.wantKey]) < 16 {
				t.Errorf("%s: Secret %s key %s holds %q", tc.name, wantSecret, tc.wantKey, s.StringData[tc.wantKey])
			}
		} else if wantSecret != tc.vals["console"].(map[string]any)["existingSecret"] {
			t.Errorf("%s: Secret %s is neither rendered nor console.existingSecret", tc.name, wantSecret)
		}
	}
}

// TestChartConsoleServes runs `idem serve` on the configuration the console variant renders
// (a memory store, local addresses, the token in a file where the Secret would be mounted)
// and checks that the console answers its token and refuses a request without it.
func TestChartConsoleServes(t *testing.T) {
	t.Parallel()
	bin := idemBinary(t)
	r := renderVariant(t, readValues(t, "console"))
	dir := t.TempDir()
	token := "0123456789abcdef0123456789abcdef"
	if err := os.WriteFile(filepath.Join(dir, "console-token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	// The config file as the chart wrote it, with this machine's addresses and files in place
	// of the pod's.
	var cm corev1.ConfigMap
	into(t, r.ms.find("ConfigMap", ""), &cm)
	var file map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &file); err != nil {
		t.Fatal(err)
	}
	if file["console_token_file"] != r.raw.ConsoleTokenFile || file["console_token_file"] == "" {
		t.Fatalf("console_token_file %v in the rendered file", file["console_token_file"])
	}
	consoleAddr := free()
	file["listen"], file["metrics_listen"], file["console_listen"] = free(), free(), consoleAddr
	file["console_token_file"] = filepath.Join(dir, "console-token")
	file["upstream"] = "http://" + free()
	out, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), out, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", filepath.Join(dir, "config.yaml"))
	cmd.Env = append(os.Environ(), "IDEM_STORE=memory://", "IDEM_CONSOLE_TOKEN=", "IDEM_CONSOLE_USER=", "IDEM_CONSOLE_PASSWORD=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	listening := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := false
		for sc.Scan() {
			t.Log(sc.Text())
			if !once && strings.Contains(sc.Text(), "console listening") {
				once = true
				close(listening)
			}
		}
	}()
	select {
	case <-listening:
	case <-ctx.Done():
		t.Fatal("idem serve on the chart's console config never said the console listens")
	}
	get := func(auth string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+consoleAddr+"/", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := get("Bearer " + token); code != http.StatusOK {
		t.Errorf("console with the token from the file: %d, want 200", code)
	}
	if code := get(""); code != http.StatusUnauthorized {
		t.Errorf("console without a token: %d, want 401", code)
	}
	if code := get("Bearer fedcba9876543210fedcba9876543210"); code != http.StatusUnauthorized {
		t.Errorf("console with another token: %d, want 401", code)
	}
}
