package tools

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/idemkit/idem/gateway"
)

const chartDir = "../helm/idem"

// kubeVersion is the Kubernetes version the chart is rendered for: one that has native
// sidecars (1.29 and later), which the chart requires. Helm's own default is older.
var kubeVersion = &chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}

// variants are the values files every chart test renders: each form the chart documents.
var variants = []string{"standalone", "sidecar", "servicemonitor", "existing-secret", "console"}

func valuesFile(name string) string { return filepath.Join(chartDir, "ci", name+"-values.yaml") }

func readValues(t *testing.T, name string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(valuesFile(name))
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// render runs what `helm template` runs on the chart with vals, and returns the rendered
// manifests.
func render(vals map[string]any) (string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return "", err
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "idem", "payments"
	inst.KubeVersion = kubeVersion
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return "", err
	}
	return rel.Manifest, nil
}

// manifests is a rendering split into its objects.
type manifests []*unstructured.Unstructured

func parseManifests(t *testing.T, out string) manifests {
	t.Helper()
	var objs manifests
	for _, doc := range strings.Split(out, "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("a rendered document is not YAML: %v\n%s", err, doc)
		}
		if m == nil {
			continue // only comments
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs
}

func (ms manifests) find(kind, name string) *unstructured.Unstructured {
	for _, m := range ms {
		if m.GetKind() == kind && (name == "" || m.GetName() == name) {
			return m
		}
	}
	return nil
}

func (ms manifests) kinds() map[string]int {
	k := map[string]int{}
	for _, m := range ms {
		k[m.GetKind()]++
	}
	return k
}

// into decodes an object into its Go type, strictly: a field the type does not have is an error.
func into(t *testing.T, u *unstructured.Unstructured, out any) {
	t.Helper()
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, out); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
}

// validate checks one rendered object against the Kubernetes schema offline: for the built-in
// kinds, the OpenAPI schema compiled into client-go (types, and no field the schema lacks),
// then a strict decoding into the API's Go type; for a ServiceMonitor, a strict decoding into
// the Prometheus Operator's type.
func validate(u *unstructured.Unstructured) error {
	gvk := u.GroupVersionKind()
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		return err
	}
	if gvk.Group == monitoringv1.SchemeGroupVersion.Group {
		if gvk.Version != "v1" || gvk.Kind != monitoringv1.ServiceMonitorsKind {
			return fmt.Errorf("unknown monitoring kind %s", gvk)
		}
		var sm monitoringv1.ServiceMonitor
		return yaml.UnmarshalStrict(b, &sm)
	}
	if _, err := typeConverter.ObjectToTyped(u); err != nil {
		return fmt.Errorf("%s %s does not match the Kubernetes schema: %w", gvk.Kind, u.GetName(), err)
	}
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		return fmt.Errorf("%s: %w", gvk, err)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		return fmt.Errorf("%s %s: %w", gvk.Kind, u.GetName(), err)
	}
	return nil
}

var typeConverter managedfields.TypeConverter = applyconfigurations.NewTypeConverter(scheme.Scheme)

// TestChartLint runs helm lint on the chart with each variant's values, and fails on any
// message of warning level or above.
func TestChartLint(t *testing.T) {
	t.Parallel()
	for _, name := range variants {
		res := lint.AllWithKubeVersion(chartDir, readValues(t, name), "payments", kubeVersion)
		for _, m := range res.Messages {
			t.Logf("%s: %s", name, m)
			if m.Severity >= support.WarningSev {
				t.Errorf("%s: helm lint: %s", name, m)
			}
		}
	}
}

// TestChartRendersValidManifests renders each variant as helm template does and checks every
// object against the Kubernetes schema, and that each variant has the objects it promises.
func TestChartRendersValidManifests(t *testing.T) {
	t.Parallel()
	want := map[string]map[string]int{
		"standalone":      {"Deployment": 1, "Service": 1, "ConfigMap": 1, "Secret": 2, "PodDisruptionBudget": 1},
		"sidecar":         {"Deployment": 1, "Service": 1, "ConfigMap": 1, "Secret": 2, "PodDisruptionBudget": 1},
		"servicemonitor":  {"Deployment": 1, "Service": 1, "ConfigMap": 1, "Secret": 1, "PodDisruptionBudget": 1, "ServiceMonitor": 1},
		"existing-secret": {"Deployment": 1, "Service": 1, "ConfigMap": 1},
		"console":         {"Deployment": 1, "Service": 1, "ConfigMap": 1, "Secret": 1, "PodDisruptionBudget": 1},
	}
	for _, name := range variants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			out, err := render(readValues(t, name))
			if err != nil {
				t.Fatal(err)
			}
			ms := parseManifests(t, out)
			for _, m := range ms {
				if err := validate(m); err != nil {
					t.Error(err)
				}
			}
			got := ms.kinds()
			if fmt.Sprint(got) != fmt.Sprint(want[name]) {
				t.Errorf("objects %v, want %v", got, want[name])
			}
		})
	}
}

// TestSchemaValidationRefuses checks that the validation catches what it is for: a field the
// schema lacks, a value of the wrong type, in a built-in kind and in a ServiceMonitor.
func TestSchemaValidationRefuses(t *testing.T) {
	t.Parallel()
	out, err := render(readValues(t, "servicemonitor"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind  string
		plant func(u *unstructured.Unstructured)
	}{
		{"Deployment", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(30), "spec", "template", "spec", "terminationGracePeriod")
		}},
		{"Deployment", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "two", "spec", "replicas")
		}},
		{"Service", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "metrics", "spec", "ports")
		}},
		{"ServiceMonitor", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "metrics", "spec", "endpointz")
		}},
	} {
		u := parseManifests(t, out).find(tc.kind, "")
		if err := validate(u); err != nil {
			t.Fatalf("%s as rendered: %v", tc.kind, err)
		}
		tc.plant(u)
		if err := validate(u); err == nil {
			t.Errorf("%s with a planted fault passed the validation: %v", tc.kind, u.Object["spec"])
		}
	}
}

// rendered is one variant's Deployment and the gateway configuration the chart wrote.
type rendered struct {
	ms     manifests
	deploy appsv1.Deployment
	idem   corev1.Container
	raw    gateway.Config // as the config file says
	cfg    gateway.Config // as the gateway reads it, defaults applied
}

func renderVariant(t *testing.T, vals map[string]any) rendered {
	t.Helper()
	out, err := render(vals)
	if err != nil {
		t.Fatal(err)
	}
	r := rendered{ms: parseManifests(t, out)}
	into(t, r.ms.find("Deployment", ""), &r.deploy)
	for _, c := range r.deploy.Spec.Template.Spec.Containers {
		if c.Name == "idem" {
			r.idem = c
		}
	}
	var cm corev1.ConfigMap
	into(t, r.ms.find("ConfigMap", ""), &cm)
	cfg, err := gateway.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("the gateway does not load the chart's config: %v\n%s", err, cm.Data["config.yaml"])
	}
	r.raw, r.cfg = cfg, cfg.WithDefaults()
	return r
}

// TestChartConfigLoadsInGateway loads the configuration each variant renders with the
// gateway's own parser, checks that the Deployment wires it (store URL from a Secret, scope
// secret file, probes on the metrics listener), and starts a gateway on it.
func TestChartConfigLoadsInGateway(t *testing.T) {
	t.Parallel()
	for _, name := range variants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			vals := readValues(t, name)
			r := renderVariant(t, vals)
			cfg := r.cfg
			if r.raw.Store != "" {
				t.Errorf("the store URL is in the config file (%q): it must come from a Secret", r.raw.Store)
			}
			// The store URL: IDEM_STORE from a Secret the release has or names.
			var store *corev1.EnvVar
			for i, e := range r.idem.Env {
				if e.Name == "IDEM_STORE" {
					store = &r.idem.Env[i]
				}
			}
			if store == nil || store.ValueFrom == nil || store.ValueFrom.SecretKeyRef == nil {
				t.Fatalf("IDEM_STORE is not taken from a Secret: %+v", store)
			}
			ref := store.ValueFrom.SecretKeyRef
			if sec := r.ms.find("Secret", ref.Name); sec != nil {
				var s corev1.Secret
				into(t, sec, &s)
				if s.StringData[ref.Key] == "" {
					t.Errorf("Secret %s has no key %s", ref.Name, ref.Key)
				}
			} else if ref.Name != vals["store"].(map[string]any)["existingSecret"] {
				t.Errorf("IDEM_STORE names Secret %s, which is neither rendered nor store.existingSecret", ref.Name)
			}
			// The scope secret: the file the config names is the Secret's key, mounted.
			if cfg.Scope != gateway.ScopeNone {
				mounted := false
				for _, m := range r.idem.VolumeMounts {
					for _, v := range r.deploy.Spec.Template.Spec.Volumes {
						if v.Name != m.Name || v.Secret == nil {
							continue
						}
						for _, it := range v.Secret.Items {
							if filepath.Join(m.MountPath, it.Path) == cfg.ScopeSecretFile {
								mounted = true
							}
						}
					}
				}
				if !mounted {
					t.Errorf("scope_secret_file %s is not a mounted Secret key", cfg.ScopeSecretFile)
				}
			}
			// Probes: /healthz and /readyz on the metrics listener, which stays open through
			// the drain.
			_, mport, _ := net.SplitHostPort(cfg.MetricsListen)
			_, lport, _ := net.SplitHostPort(cfg.Listen)
			ports := map[string]string{}
			for _, p := range r.idem.Ports {
				ports[p.Name] = strconv.Itoa(int(p.ContainerPort))
			}
			if ports["metrics"] != mport || ports["http"] != lport {
				t.Errorf("container ports %v do not match listen %s and metrics_listen %s", ports, cfg.Listen, cfg.MetricsListen)
			}
			for probe, want := range map[*corev1.Probe]string{r.idem.LivenessProbe: "/healthz", r.idem.ReadinessProbe: "/readyz", r.idem.StartupProbe: "/healthz"} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.String() != "metrics" {
					t.Errorf("probe %+v, want GET %s on the metrics port", probe, want)
				}
			}
			if r.idem.Resources.Requests.Cpu().IsZero() || r.idem.Resources.Requests.Memory().IsZero() {
				t.Errorf("no resource requests: %+v", r.idem.Resources)
			}
			startGateway(t, cfg)
		})
	}
}

// startGateway builds a gateway from the chart's configuration, on a memory store and a scope
// secret file of its own, and checks that it answers /readyz.
func startGateway(t *testing.T, cfg gateway.Config) {
	t.Helper()
	cfg.Store = "memory://"
	if cfg.ScopeSecretFile != "" {
		cfg.ScopeSecretFile = filepath.Join(t.TempDir(), "scope-secret")
		if err := os.WriteFile(cfg.ScopeSecretFile, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the chart's config is not valid: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := gateway.New(ctx, cfg, gateway.Options{Logger: nil})
	if err != nil {
		t.Fatalf("gateway.New on the chart's config: %v", err)
	}
	defer g.Close()
	srv := httptest.NewServer(g.OpsHandler())
	defer srv.Close()
	res, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("/readyz of a gateway on the chart's config: %d %s", res.StatusCode, body)
	}
}

// set returns a copy of vals with the value at the dotted path replaced.
func set(vals map[string]any, path string, v any) map[string]any {
	out := map[string]any{}
	for k, x := range vals {
		out[k] = x
	}
	head, rest, nested := strings.Cut(path, ".")
	if !nested {
		out[head] = v
		return out
	}
	sub, _ := out[head].(map[string]any)
	if sub == nil {
		sub = map[string]any{}
	}
	out[head] = set(sub, rest, v)
	return out
}

// TestChartGracePeriod checks that the pod's terminationGracePeriodSeconds outlasts the
// gateway's whole shutdown as the gateway itself reads its timings: the shutdown delay, the
// drain bounded by shutdown_timeout (by default upstream_timeout + 5s), and the abort after
// it; in the sidecar form the API's own stop comes after.
func TestChartGracePeriod(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		variant string
		set     map[string]any
		want    int64
	}{
		{"standalone", nil, 5 + 65 + 10},
		{"standalone", map[string]any{"timing.upstreamTimeoutSeconds": 300}, 5 + 305 + 10},
		{"standalone", map[string]any{"timing.shutdownTimeoutSeconds": 20, "timing.shutdownDelaySeconds": 0}, 0 + 20 + 10},
		{"servicemonitor", nil, 10 + 125 + 10},
		{"existing-secret", nil, 5 + 90 + 10},
		{"sidecar", nil, 5 + 65 + 10 + 20},
	} {
		vals := readValues(t, tc.variant)
		for k, v := range tc.set {
			vals = set(vals, k, v)
		}
		r := renderVariant(t, vals)
		grace := r.deploy.Spec.Template.Spec.TerminationGracePeriodSeconds
		if grace == nil {
			t.Fatalf("%s %v: no terminationGracePeriodSeconds", tc.variant, tc.set)
		}
		shutdown := time.Duration(r.cfg.ShutdownDelay) + time.Duration(r.cfg.ShutdownTimeout)
		if time.Duration(*grace)*time.Second <= shutdown {
			t.Errorf("%s %v: grace %ds does not exceed shutdown_delay + shutdown_timeout = %s", tc.variant, tc.set, *grace, shutdown)
		}
		if *grace != tc.want {
			t.Errorf("%s %v: grace %ds, want %ds", tc.variant, tc.set, *grace, tc.want)
		}
	}
}

// TestChartSidecar checks the sidecar form: the API runs as a native sidecar (an init
// container that keeps running, so that it stops after the gateway has drained), and the
// gateway's upstream is the API's port in the pod.
func TestChartSidecar(t *testing.T) {
	t.Parallel()
	r := renderVariant(t, readValues(t, "sidecar"))
	inits := r.deploy.Spec.Template.Spec.InitContainers
	if len(inits) != 1 || inits[0].Name != "payments" || inits[0].RestartPolicy == nil || *inits[0].RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Fatalf("the API is not a native sidecar: %+v", inits)
	}
	if r.cfg.Upstream != "http://127.0.0.1:3000" {
		t.Errorf("upstream %q, want the API's port in the pod", r.cfg.Upstream)
	}
	if len(r.deploy.Spec.Template.Spec.Containers) != 1 {
		t.Errorf("containers: %d, want the gateway alone", len(r.deploy.Spec.Template.Spec.Containers))
	}
}

// TestChartRefusesIncomplete checks that the chart refuses to render what would not start or
// would not be safe, naming the value to set.
func TestChartRefusesIncomplete(t *testing.T) {
	t.Parallel()
	base := readValues(t, "standalone")
	for _, tc := range []struct {
		path string
		v    any
		want string
	}{
		{"store.url", "", "store.url or store.existingSecret is required"},
		{"upstream", "", "upstream is required"},
		{"scope.secret", "", "scope.secret must have at least 16 bytes"},
		{"scope.secret", "short", "scope.secret must have at least 16 bytes"},
		{"console.enabled", true, "console.token must have at least 16 bytes"},
	} {
		_, err := render(set(base, tc.path, tc.v))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%v: err %v, want %q", tc.path, tc.v, err, tc.want)
		}
	}
	if _, err := render(base); err != nil {
		t.Fatal(err)
	}
}
