package idemhttp

import (
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Problem types: the stable `type` URIs of the application/problem+json (RFC 9457) answers the
// middleware writes. Clients match on them, not on the title text.
const (
	// ProblemMissingKey (400): the route requires a key and the request has none.
	ProblemMissingKey = "https://idemkit.dev/problems/missing-key"
	// ProblemInvalidKey (400): the key is not 1 to 255 printable ASCII characters, not a valid
	// structured-field string, or was sent twice.
	ProblemInvalidKey = "https://idemkit.dev/problems/invalid-key"
	// ProblemInvalidScope (400): the caller's scope could not be determined.
	ProblemInvalidScope = "https://idemkit.dev/problems/invalid-scope"
	// ProblemScopeHeaderSpelling (400): the request carries the scope header spelled with
	// underscores for hyphens (X_API_KEY for X-API-Key), which the application may read as the
	// scope header (ErrScopeHeaderSpelling). Send the header under its own name.
	ProblemScopeHeaderSpelling = "https://idemkit.dev/problems/scope-header-spelling"
	// ProblemInvalidBody (400): the body could not be read or fingerprinted.
	ProblemInvalidBody = "https://idemkit.dev/problems/invalid-body"
	// ProblemRequestTooLarge (413): the body is larger than Options.MaxRequestBody.
	ProblemRequestTooLarge = "https://idemkit.dev/problems/request-too-large"
	// ProblemInFlight (409, with Retry-After): a request with this key is being processed now.
	// Retry after the delay; the retry gets the stored response.
	ProblemInFlight = "https://idemkit.dev/problems/in-flight"
	// ProblemMismatch (422): the key was used before with a different request (method, path,
	// query or body). Nothing was done. Use a new key for a new request.
	ProblemMismatch = "https://idemkit.dev/problems/mismatch"
	// ProblemStoreUnavailable (503, with Retry-After): the idempotency store could not be
	// reached, so the request was not processed (fail closed). Retry with the same key.
	ProblemStoreUnavailable = "https://idemkit.dev/problems/store-unavailable"
	// ProblemOverloaded (503, with Retry-After): the server holds as much request and response
	// data as it is allowed to (Options.MemoryBudget), so the request was not processed. Retry
	// with the same key.
	ProblemOverloaded = "https://idemkit.dev/problems/overloaded"
	// ProblemNotRetained (the original status, with Idempotent-Replayed: true): the request was
	// processed before, but its response was larger than the middleware keeps, so it cannot be
	// replayed. The operation is NOT executed again.
	ProblemNotRetained = "https://idemkit.dev/problems/response-not-retained"
	// ProblemHandlerPanic (500): the handler panicked before answering. Nothing is stored; the
	// key is released, so a retry executes.
	ProblemHandlerPanic = "https://idemkit.dev/problems/handler-panic"
	// ProblemInternal (500): an unexpected error in the middleware. Nothing was done.
	ProblemInternal = "https://idemkit.dev/problems/internal"
)

// ProblemContentType is the media type of the middleware's error bodies.
const ProblemContentType = "application/problem+json"

// Problem is one of the middleware's refusals, as a ProblemFormatter receives it.
type Problem struct {
	// Status is the HTTP status: 400, 409, 413, 422, 500 or 503, or for a replay of a
	// response that was not retained, that response's status.
	Status int
	// Type is the problem's stable type URI, one of the Problem* constants.
	Type string
	// Title is the human-readable summary, in English.
	Title string
}

// Code returns the last segment of the problem's type URI ("in-flight", "mismatch",
// "store-unavailable", …): a short, stable code for an API's own error envelope.
func (p Problem) Code() string {
	return p.Type[strings.LastIndexByte(p.Type, '/')+1:]
}

// A ProblemFormatter writes the middleware's refusals in an API's own error shape (Stripe's
// envelope, a company standard) instead of application/problem+json: it returns the body's
// media type and the body. It is called once per problem when the middleware is made (and
// for each replay of a response that was not retained, whose status varies), so it may take
// its time; it must not return an empty content type. The status, Retry-After and
// X-Content-Type-Options: nosniff are the middleware's, whatever the formatter returns.
type ProblemFormatter func(Problem) (contentType string, body []byte)

// Write answers p in f's shape, with the headers the middleware's own problems carry
// (Content-Type, Content-Length, X-Content-Type-Options: nosniff), or as WriteProblem does
// when f is nil. It is for handlers and proxies beside the middleware that refuse requests in
// the same shape as the middleware configured with f.
func (f ProblemFormatter) Write(w http.ResponseWriter, p Problem) {
	if f == nil {
		WriteProblem(w, p.Status, p.Type, p.Title)
		return
	}
	ct, body := f(p)
	q := problem{status: p.Status, ct: []string{ct}, body: body, length: []string{strconv.Itoa(len(body))}}
	q.write(w, nil)
}

// problem is one precomputed answer.
type problem struct {
	status     int
	typ, title string
	ct         []string // Content-Type
	body       []byte
	length     []string // Content-Length, precomputed
	outcome    Outcome  // reported when the middleware refuses a request with this problem
	retryAfter []string // Retry-After of a refusal, if any
}

func newProblem(status int, typ, title string, outcome Outcome) *problem {
	b := []byte(`{"type":"` + typ + `","title":"` + title + `","status":` + strconv.Itoa(status) + "}\n")
	return &problem{status: status, typ: typ, title: title, ct: problemCT, body: b, length: []string{strconv.Itoa(len(b))}, outcome: outcome}
}

// formatted returns p with its body and content type made by f.
func (p *problem) formatted(f ProblemFormatter) *problem {
	ct, body := f(Problem{Status: p.status, Type: p.typ, Title: p.title})
	q := *p
	q.ct, q.body, q.length = []string{ct}, body, []string{strconv.Itoa(len(body))}
	return &q
}

// allProblems are the middleware's precomputed refusals, formatted once per middleware when
// Options.FormatProblem is set.
var allProblems = []*problem{probMissingKey, probInvalidKey, probInvalidScope, probScopeSpelling, probInvalidBody,
	probTooLarge, probInFlight, probMismatch, probStore, probOverloaded, probPanic, probInternal}

// withRetryAfter sets the Retry-After, in seconds, sent when the middleware refuses a request
// with p.
func (p *problem) withRetryAfter(seconds int64) *problem {
	p.retryAfter = retryAfterValue(seconds)
	return p
}

var (
	probMissingKey    = newProblem(400, ProblemMissingKey, "This request requires an idempotency key", OutcomeMissingKey)
	probInvalidKey    = newProblem(400, ProblemInvalidKey, "The idempotency key must be 1 to 255 printable ASCII characters, sent once", OutcomeInvalidKey)
	probInvalidScope  = newProblem(400, ProblemInvalidScope, "The caller could not be identified", OutcomeInvalidScope)
	probScopeSpelling = newProblem(400, ProblemScopeHeaderSpelling, "The scope header was sent with underscores for hyphens; send it under its own name", OutcomeInvalidScope)
	probInvalidBody   = newProblem(400, ProblemInvalidBody, "The request body could not be read", OutcomeInvalidBody)
	probTooLarge      = newProblem(413, ProblemRequestTooLarge, "The request body is too large", OutcomeTooLarge)
	probInFlight      = newProblem(409, ProblemInFlight, "A request with this idempotency key is being processed; retry later", OutcomeInFlight)
	probMismatch      = newProblem(422, ProblemMismatch, "This idempotency key was used with a different request", OutcomeMismatch)
	probStore         = newProblem(503, ProblemStoreUnavailable, "The request was not processed: the idempotency store is unavailable; retry later", OutcomeStoreError)
	// Buffers are held as long as a request takes: a second is a fair first guess.
	probOverloaded = newProblem(503, ProblemOverloaded, "The request was not processed: the server is busy; retry later", OutcomeOverloaded).withRetryAfter(1)
	probPanic      = newProblem(500, ProblemHandlerPanic, "The request failed; it may be retried with the same key", OutcomeReleased)
	probInternal   = newProblem(500, ProblemInternal, "The request was not processed", OutcomeError)
)

var (
	problemCT = []string{ProblemContentType}
	nosniff   = []string{"nosniff"}
)

// write sends the problem. retryAfter, if not nil, is the Retry-After value.
func (p *problem) write(w http.ResponseWriter, retryAfter []string) {
	h := w.Header()
	h["Content-Type"] = p.ct
	h["Content-Length"] = p.length
	h["X-Content-Type-Options"] = nosniff
	if retryAfter != nil {
		h["Retry-After"] = retryAfter
	}
	w.WriteHeader(p.status)
	_, _ = w.Write(p.body)
}

// WriteProblem answers with an application/problem+json (RFC 9457) body of the given type URI,
// title and status, with the headers the middleware's own problems carry (Content-Type,
// Content-Length, X-Content-Type-Options: nosniff). It is for handlers and proxies in front of
// or behind the middleware that refuse a request in the same vocabulary. The title is
// JSON-escaped; typ must be a URI.
func WriteProblem(w http.ResponseWriter, status int, typ, title string) {
	body := make([]byte, 0, len(typ)+len(title)+48)
	body = append(body, `{"type":`...)
	body = appendJSONString(body, typ)
	body = append(body, `,"title":`...)
	body = appendJSONString(body, title)
	body = append(body, `,"status":`...)
	body = strconv.AppendInt(body, int64(status), 10)
	body = append(body, "}\n"...)
	p := problem{status: status, ct: problemCT, body: body, length: []string{strconv.Itoa(len(body))}}
	p.write(w, nil)
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(out []byte, s string) []byte {
	const hex = "0123456789abcdef"
	out = append(out, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			out = append(out, '\\', byte(r))
		case r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029:
			out = append(out, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
		default:
			out = utf8.AppendRune(out, r)
		}
	}
	return append(out, '"')
}

// notRetainedTitle is the title of a replay whose response was not kept.
const notRetainedTitle = "This request was already processed; its response was too large to be retained"

// notRetainedBody is the body of a replay whose response was not kept.
func notRetainedBody(status int) []byte {
	return []byte(`{"type":"` + ProblemNotRetained + `","title":"` + notRetainedTitle + `","status":` +
		strconv.Itoa(status) + "}\n")
}

// retryAfterValue returns a Retry-After value in whole seconds (at least 1).
func retryAfterValue(seconds int64) []string {
	if seconds < 1 {
		seconds = 1
	}
	if seconds < int64(len(smallRetryAfter)) {
		return smallRetryAfter[seconds]
	}
	return []string{strconv.FormatInt(seconds, 10)}
}

var smallRetryAfter = func() (v [61][]string) {
	for i := range v {
		v[i] = []string{strconv.Itoa(i)}
	}
	return v
}()
