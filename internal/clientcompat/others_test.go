package clientcompat_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
)

// otherClients are the clients in other languages, run as programs. One whose program is
// missing is left out with a message (a failure under IDEM_REQUIRE_SERVICES=1).
func otherClients(t *testing.T) []client {
	secs := strconv.FormatFloat(attemptTimeout.Seconds(), 'f', -1, 64)
	var cs []client
	if have(t, "python3", "-c", "import requests, urllib3; assert int(urllib3.__version__.split('.')[0]) >= 2") {
		cs = append(cs, client{name: "python-requests", maxPause: 2 * time.Second, post: func(t *testing.T, url, key, body string) result {
			return runJSON(t, "python3", "testdata/requests_retry.py", url+"/v1/charges", key, body, secs, "tenant-1")
		}})
	}
	if have(t, "node", "-e", "if (typeof fetch !== 'function') process.exit(1)") {
		cs = append(cs, client{name: "node-fetch", maxPause: 2 * time.Second, cutRetried: true, post: func(t *testing.T, url, key, body string) result {
			return runJSON(t, "node", "testdata/fetch_retry.mjs", url+"/v1/charges", key, body, secs, "tenant-1")
		}})
	}
	if have(t, "curl", "--version") {
		cs = append(cs, client{name: "curl", maxPause: 2 * time.Second, cutRetried: true, post: func(t *testing.T, url, key, body string) result {
			start := time.Now()
			out, err := exec.Command("sh", "testdata/curl_retry.sh", url+"/v1/charges", key, body, secs, "tenant-1").Output()
			r := result{Seconds: time.Since(start).Seconds()}
			first, rest, _ := strings.Cut(string(out), "\n")
			code, replayed, _ := strings.Cut(first, " ")
			r.Status, _ = strconv.Atoi(code)
			r.Replayed, r.Body = replayed == "replayed", rest
			if err != nil || r.Status == 0 {
				r.Err = strings.TrimSpace("curl: " + errText(err) + " " + string(out))
			}
			return r
		}})
	}
	return cs
}

// have reports whether a program runs; when it does not, the test says so and leaves it out.
func have(t *testing.T, name string, args ...string) bool {
	if err := exec.Command(name, args...).Run(); err != nil {
		testenv.Missing(t, "%s %s: %v: its client is not tested", name, strings.Join(args, " "), err)
		return false
	}
	return true
}

func errText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Error() + ": " + string(ee.Stderr)
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// runJSON runs a client program that prints its result as one JSON object.
func runJSON(t *testing.T, name string, args ...string) result {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	var r result
	if jerr := json.Unmarshal(bytes.TrimSpace(out), &r); jerr != nil {
		t.Fatalf("%s %v: %v %s (%v)", name, args, err, out, jerr)
	}
	return r
}
