package doccheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// harness runs a README block as a program: it gives the block's undeclared names (its
// go-context) values, and stands in for http.ListenAndServe with two tenants who send the
// same Idempotency-Key and the same body, each with their own bearer token.
const harness = `package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
)

var charges atomic.Int32

func init() {
	%s
}

func payments() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "charge %%d for %%s", n, r.Header.Get("Authorization"))
	})
}

var _ = context.Background

type answer struct {
	Status   int
	Replayed string
	Body     string
}

// serveTwoTenants stands in for http.ListenAndServe: alice charges, bob sends her key and her
// body with his own token, alice retries. It prints the answers and the charges as JSON.
func serveTwoTenants(_ string, h http.Handler) error {
	srv := httptest.NewServer(h)
	post := func(token string) answer {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/charges", strings.NewReader(` + "`" + `{"amount":1000,"currency":"eur"}` + "`" + `))
		req.Header.Set("Authorization", token)
		req.Header.Set("Idempotency-Key", "order-1001")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return answer{resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(body)}
	}
	out := map[string]any{"alice": post("Bearer alice"), "bob": post("Bearer bob"), "alice_again": post("Bearer alice")}
	out["charges"] = charges.Load()
	srv.Close()
	json.NewEncoder(os.Stdout).Encode(out)
	os.Exit(0)
	return nil
}
`

// contextValues gives a value to each name a README block may leave to its go-context.
var contextValues = map[string]string{
	"ctx":             "ctx = context.Background()",
	"paymentsHandler": "paymentsHandler = payments()",
	"scopeSecret":     `scopeSecret = []byte("the scope secret of this test, 32 bytes")`,
}

// TestReadmeMiddlewareKeepsTenantsApart runs the README's middleware block as it is written,
// with two callers: bob, sending alice's key and alice's body with his own bearer token, must
// get a charge of his own, never alice's stored answer; alice's retry gets hers replayed.
func TestReadmeMiddlewareKeepsTenantsApart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the README's middleware block with go build; skipped with -short")
	}
	t.Parallel()
	root := repoRoot(t)
	var b *block
	for _, c := range blocks(t, root, "README.md") {
		if c.lang == "go" && strings.Contains(c.code, "idemhttp.New(") && strings.Contains(c.code, "http.ListenAndServe(") {
			b = &c
			break
		}
	}
	if b == nil {
		t.Fatal("no Go block of the README serves idemhttp.New's middleware with http.ListenAndServe")
	}
	b.code = strings.Replace(b.code, "http.ListenAndServe(", "serveTwoTenants(", 1)
	src, err := goFile(*b, modulePackages(t, root))
	if err != nil {
		t.Fatal(err)
	}
	src = bytes.Replace(src, []byte("package snippet\n"), []byte("package main\n"), 1)
	src = bytes.Replace(src, []byte("\nfunc _() {\n"), []byte("\nfunc main() {\n"), 1)

	var inits []string
	for _, d := range strings.Split(b.context, ";") {
		f := strings.Fields(d)
		if len(f) < 2 || f[0] != "var" {
			continue
		}
		v, ok := contextValues[f[1]]
		if !ok {
			t.Fatalf("the README's middleware block declares %q in its go-context: give it a value in contextValues", f[1])
		}
		inits = append(inits, v)
	}

	tmp := t.TempDir()
	dir := filepath.Join(root, "internal", "doccheck", "generated", "readmetenants")
	overlay := map[string]string{}
	for name, content := range map[string][]byte{
		"snippet.go": src,
		"harness.go": []byte(fmt.Sprintf(harness, strings.Join(inits, "\n\t"))),
	} {
		file := filepath.Join(tmp, name)
		if err := os.WriteFile(file, content, 0o644); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(dir, name)] = file
	}
	ov, _ := json.Marshal(map[string]any{"Replace": overlay})
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "readmetenants")
	build := exec.Command("go", "build", "-overlay", ovFile, "-o", bin, "./internal/doccheck/generated/readmetenants")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's middleware block does not build as a program:\n%s", out)
	}
	run := exec.Command(bin)
	run.Dir = t.TempDir() // the block's store file is created here
	var stderr bytes.Buffer
	run.Stderr = &stderr
	out, err := run.Output()
	if err != nil {
		t.Fatalf("the README's middleware block failed: %v\n%s", err, stderr.Bytes())
	}
	type answer struct {
		Status   int
		Replayed string
		Body     string
	}
	var got struct {
		Alice, Bob answer
		AliceAgain answer `json:"alice_again"`
		Charges    int
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("alice %+v; bob %+v; alice again %+v; %d charges", got.Alice, got.Bob, got.AliceAgain, got.Charges)
	if got.Alice.Status != 201 || got.Alice.Body != "charge 1 for Bearer alice" {
		t.Fatalf("alice's charge: %+v", got.Alice)
	}
	if strings.Contains(got.Bob.Body, "alice") || got.Bob.Replayed != "" {
		t.Errorf("bob, sending alice's key and body, received alice's stored answer: %+v", got.Bob)
	}
	if got.Bob.Status != 201 || got.Bob.Body != "charge 2 for Bearer bob" {
		t.Errorf("bob's charge: %+v, want his own (charge 2 for Bearer bob)", got.Bob)
	}
	if got.AliceAgain.Replayed != "true" || got.AliceAgain.Body != got.Alice.Body {
		t.Errorf("alice's retry: %+v, want her first answer replayed", got.AliceAgain)
	}
	if got.Charges != 2 {
		t.Errorf("%d charges, want 2: one each", got.Charges)
	}
}
