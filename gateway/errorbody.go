package gateway

import (
	"bytes"
	"encoding/json"
	"strings"
	"text/template"

	"github.com/idemkit/idem/idemhttp"
)

// ErrorBody writes the gateway's refusals (400, 409, 413, 422, 500, 502, 503, 504) in the API's
// own error shape instead of application/problem+json, for clients that only understand
// that shape (stripe-go, for one, retries a 422 it cannot read as an error):
//
//	error_body:
//	  content_type: application/json
//	  template: '{"error":{"type":"idempotency_error","code":{{json .Code}},"message":{{json .Title}}}}'
//
// The template is a Go text/template over an idemhttp.Problem: .Status (the HTTP status),
// .Type (the problem's type URI), .Title (its English summary) and .Code (the type URI's last
// segment: in-flight, mismatch, store-unavailable, …). {{json .Title}} writes a value as JSON.
// The status and Retry-After are the gateway's whatever the body says. As everywhere in the
// config file, environment variables are expanded first: a "$" in the template is read as one.
type ErrorBody struct {
	// ContentType is the body's media type. Default application/json.
	ContentType string `yaml:"content_type"`
	// Template makes the body. Required.
	Template string `yaml:"template"`
}

// sampleProblems are the problems a template is tried on when the configuration is loaded.
var sampleProblems = []idemhttp.Problem{
	{Status: 409, Type: idemhttp.ProblemInFlight, Title: "A request with this idempotency key is being processed; retry later"},
	{Status: 502, Type: ProblemUpstream, Title: `The upstream "could not" be reached \ nothing was sent.`},
}

// formatter parses the template and returns the formatter it makes. A template that does not
// parse, fails on a problem, or (with a JSON media type) makes anything but JSON is an error
// naming error_body.
func (e ErrorBody) formatter() (idemhttp.ProblemFormatter, error) {
	ct := e.ContentType
	if ct == "" {
		ct = "application/json"
	}
	if strings.TrimSpace(e.Template) == "" {
		return nil, configError("error_body.template", "is required")
	}
	tpl, err := template.New("error_body").Option("missingkey=error").Funcs(template.FuncMap{
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
	}).Parse(e.Template)
	if err != nil {
		return nil, configError("error_body.template", "%v", err)
	}
	isJSON := strings.Contains(strings.ToLower(ct), "json")
	for _, p := range sampleProblems {
		var b bytes.Buffer
		if err := tpl.Execute(&b, p); err != nil {
			return nil, configError("error_body.template", "%v", err)
		}
		if isJSON && !json.Valid(b.Bytes()) {
			return nil, configError("error_body.template", "makes invalid JSON for a %d (use {{json .Title}} to quote a value): %s", p.Status, b.String())
		}
	}
	return func(p idemhttp.Problem) (string, []byte) {
		var b bytes.Buffer
		if err := tpl.Execute(&b, p); err != nil {
			// Checked at load on every field: unreachable but for a template that fails on
			// one problem and not another; the client still gets a problem, in RFC 9457 form.
			b, _ := json.Marshal(struct {
				Type   string `json:"type"`
				Title  string `json:"title"`
				Status int    `json:"status"`
			}{p.Type, p.Title, p.Status})
			return idemhttp.ProblemContentType, b
		}
		return ct, b.Bytes()
	}, nil
}
