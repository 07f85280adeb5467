package idemhttp_test

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// TestWriteProblem checks that WriteProblem's body is valid JSON that reads back as what was
// written, whatever the title holds, with the headers of the middleware's own problems.
func TestWriteProblem(t *testing.T) {
	t.Parallel()
	for _, title := range []string{
		"plain", `quote " and backslash \`, "tab\tnew line\ncontrol\x01\x7f", "unicode é 漢 \u2028", "bad utf-8 \xff\xfe",
	} {
		rec := httptest.NewRecorder()
		idemhttp.WriteProblem(rec, 502, "https://example.com/problems/x", title)
		var got struct {
			Type   string `json:"type"`
			Title  string `json:"title"`
			Status int    `json:"status"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("title %q: body %q is not JSON: %v", title, rec.Body.String(), err)
		}
		want := []byte(title)
		if wantTitle := string([]rune(string(want))); got.Title != wantTitle || got.Status != 502 || got.Type != "https://example.com/problems/x" {
			t.Errorf("title %q: read back %+v", title, got)
		}
		h := rec.Result().Header
		if rec.Code != 502 || h.Get("Content-Type") != idemhttp.ProblemContentType || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("Content-Length") != strconv.Itoa(rec.Body.Len()) {
			t.Errorf("title %q: status %d, headers %v", title, rec.Code, h)
		}
	}
}
