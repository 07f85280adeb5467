package gateway

import (
	"strings"
)

// checkScopeHeader refuses a scope header name (the field scope_header, or a route's) that is
// not a header name, or that contains an underscore. Servers that follow CGI's naming read
// X_API_KEY and X-API-Key as one header, so a name with an underscore has a twin with hyphens
// that the application may read instead; the gateway refuses requests that carry the twin of
// the configured name (400, problem type scope-header-spelling), and the configured name is
// the hyphenated one. An empty name (no scope header) passes.
func checkScopeHeader(field, name string) error {
	if name == "" {
		return nil
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return configError(field, "%q is not a header name", name)
		}
	}
	if strings.Contains(name, "_") {
		return configError(field, "%q contains an underscore: servers that follow CGI's naming read it as %q, spell it with hyphens",
			name, strings.ReplaceAll(name, "_", "-"))
	}
	return nil
}
