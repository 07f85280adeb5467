package gateway

import (
	"strings"
	"testing"
)

// TestCheckScopeHeader: a scope header name must be a header name without an underscore (its
// twin with hyphens is what servers that follow CGI's naming read).
func TestCheckScopeHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"":              "",
		"X-API-Key":     "",
		"Authorization": "",
		"X_API_KEY":     "underscore",
		"x-api_key":     "underscore",
		"X API Key":     "not a header name",
		"X-API-Key:":    "not a header name",
		"X-Tenant\n":    "not a header name",
		"X-Tenant\x7f":  "not a header name", // DEL, the first byte past the printable ASCII
		"X-T\u00e9nant": "not a header name", // not ASCII
		"\"X-Tenant":    "not a header name", // a separator as the first byte
		"!#$%&'*+.^`|~": "",                  // every token character that is not a letter, digit or hyphen
	} {
		err := checkScopeHeader("scope_header", name)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("checkScopeHeader(%q) = %v, want %q", name, err, want)
		}
	}
}
