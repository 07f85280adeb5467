package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/console"
)

func init() {
	register("inspect", "show the record of a key: running, held, stale, released, completed or expired", runInspect)
}

// inspection is what `idem inspect` prints.
type inspection struct {
	Key          string              `json:"key"`
	Scope        *string             `json:"scope,omitempty"`      // the gateway's scope (an HMAC, or "" for none)
	ClientKey    string              `json:"client_key,omitempty"` // the client's key, for a key made by a gateway
	Condition    string              `json:"condition"`
	State        string              `json:"state"`
	Route        string              `json:"route,omitempty"` // what claimed the key, such as "POST /v1/orders/{id}/pay"
	Expired      bool                `json:"expired"`
	Fingerprint  string              `json:"fingerprint"`
	Token        int64               `json:"token"`
	Attempts     int                 `json:"attempts"`      // times the effect was started, across releases and takeovers
	FirstClaimed string              `json:"first_claimed"` // when the key was first claimed (RFC 3339)
	Age          string              `json:"age"`
	LeaseLeft    string              `json:"lease_left,omitempty"`
	ExpiresIn    string              `json:"expires_in,omitempty"`
	Status       int                 `json:"status,omitempty"`
	BodyBytes    int                 `json:"body_bytes"`
	BodyOmitted  bool                `json:"body_omitted,omitempty"`
	Body         string              `json:"body,omitempty"`
	StoredHeader map[string][]string `json:"headers,omitempty"`
	Request      *sentRequest        `json:"request,omitempty"` // what the client sent, when the gateway retained it
}

// sentRequest is the request a record retained (idem.Record.Request), as `idem inspect` shows
// it: credentials were redacted before it was stored.
type sentRequest struct {
	Method     string              `json:"method"`
	Target     string              `json:"target"` // path and query
	Headers    map[string][]string `json:"headers,omitempty"`
	BodyBytes  int64               `json:"body_bytes"`            // the size of the body the client sent
	BodyKept   int                 `json:"body_kept"`             // how many of its first bytes are kept
	Body       *string             `json:"body,omitempty"`        // the bytes kept, when they are UTF-8
	BodyBase64 []byte              `json:"body_base64,omitempty"` // the bytes kept, when they are not
	Truncated  bool                `json:"truncated,omitempty"`   // something was left out to fit the bound
}

// newSentRequest returns the view of r, nil for none.
func newSentRequest(r *idem.Request) *sentRequest {
	if r == nil {
		return nil
	}
	v := &sentRequest{Method: r.Method, Target: r.Target, Headers: r.Header, BodyBytes: r.BodySize, BodyKept: len(r.Body), Truncated: r.Truncated}
	if utf8.Valid(r.Body) {
		b := string(r.Body)
		v.Body = &b
	} else {
		v.BodyBase64 = r.Body
	}
	return v
}

// print writes the request as text lines, under the record's other fields.
func (v *sentRequest) print(w io.Writer) {
	fmt.Fprintf(w, "request      %s %s\n", printable(v.Method), printable(v.Target))
	names := make([]string, 0, len(v.Headers))
	for n := range v.Headers {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		for _, val := range v.Headers[n] {
			fmt.Fprintf(w, "  %s: %s\n", printable(n), printable(val))
		}
	}
	switch {
	case v.Body != nil && v.BodyKept > 0:
		fmt.Fprintf(w, "  body (%d of %d bytes): %s\n", v.BodyKept, v.BodyBytes, printable(*v.Body))
	case v.BodyKept > 0:
		fmt.Fprintf(w, "  body (%d of %d bytes): binary, see --json\n", v.BodyKept, v.BodyBytes)
	default:
		fmt.Fprintf(w, "  body (0 of %d bytes)\n", v.BodyBytes)
	}
	if v.Truncated {
		fmt.Fprintln(w, "  (cut to the retained request's bound)")
	}
}

func runInspect(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "inspect", "KEY [--scope-value VALUE | --scope none] [--store URL] [--body] [--json]")
	usage := fs.Usage
	fs.Usage = func() {
		usage()
		fmt.Fprintln(e.stderr, "\n"+keyHelp+"\n\n"+conditionHelp)
	}
	store := storeFlag(e, fs)
	sc := bindScope(e, fs)
	body := fs.Bool("body", false, "print the stored body too")
	asJSON := fs.Bool("json", false, "print JSON")
	st, rec, err := openRecord(ctx, e, fs, args, store, sc)
	if err != nil {
		return err
	}
	defer st.Close()
	now := time.Now()
	cond := console.ConditionOf(rec, now)
	in := inspection{
		Key: rec.Key, Condition: string(cond), State: rec.State.String(), Expired: rec.Expired(now), Fingerprint: rec.Fingerprint,
		Token: rec.Token, Attempts: console.Starts(rec), FirstClaimed: rec.CreatedAt.UTC().Format(time.RFC3339Nano), Age: now.Sub(rec.CreatedAt).Round(time.Millisecond).String(), Route: rec.Route,
	}
	in.Request = newSentRequest(rec.Request)
	if scope, client, ok := splitKey(rec.Key); ok {
		in.Scope, in.ClientKey = &scope, client
	}
	if cond != console.Released {
		in.ExpiresIn = rec.ExpiresAt.Sub(now).Round(time.Second).String()
	}
	if cond.Live() {
		in.LeaseLeft = rec.LeaseUntil.Sub(now).Round(time.Millisecond).String()
	}
	if r := rec.Response; r != nil {
		in.Status, in.BodyBytes, in.BodyOmitted, in.StoredHeader = r.Status, len(r.Body), r.BodyOmitted, r.Header
		if *body {
			if utf8.Valid(r.Body) {
				in.Body = string(r.Body)
			} else {
				in.Body = fmt.Sprintf("(%d bytes of binary)", len(r.Body))
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	w := e.stdout
	fmt.Fprintf(w, "key          %s\n", printable(in.Key))
	if in.Scope != nil {
		fmt.Fprintf(w, "scope        %s\nclient key   %s\n", cmp.Or(*in.Scope, "(none)"), printable(in.ClientKey))
	}
	fmt.Fprintf(w, "state        %s\n", console.Explain(cond, rec, now))
	if in.Route != "" {
		fmt.Fprintf(w, "route        %s\n", printable(in.Route))
	}
	fmt.Fprintf(w, "fingerprint  %s\n", in.Fingerprint)
	fmt.Fprintf(w, "token        %d\nattempts     %d\nfirst claim  %s\nage          %s\n", in.Token, in.Attempts, in.FirstClaimed, in.Age)
	if in.LeaseLeft != "" {
		fmt.Fprintf(w, "lease left   %s\n", in.LeaseLeft)
	}
	if in.ExpiresIn != "" {
		fmt.Fprintf(w, "expires in   %s\n", in.ExpiresIn)
	}
	if rec.Response != nil {
		fmt.Fprintf(w, "status       %d\nbody         %d bytes", in.Status, in.BodyBytes)
		if in.BodyOmitted {
			fmt.Fprint(w, " (not retained: over the size limit)")
		}
		fmt.Fprintln(w)
		if *body {
			fmt.Fprintf(w, "\n%s\n", in.Body)
		}
	}
	if in.Request != nil {
		in.Request.print(w)
	}
	return nil
}
