package idem

import (
	"bytes"
	"slices"
)

// Request is what a client sent, kept with a record for operators when the face that claimed
// the key retains requests (idemhttp's Options.RetainRequest, the gateway's retain_request):
// the answer to "what did the client send?" next to the fingerprint that only identifies it.
// Credentials never reach it: the face that fills it redacts them first, and cuts it to a
// bound it is configured with. Like the route, it takes no part in the contract: the key and
// the fingerprint decide what is a duplicate.
type Request struct {
	// Method is the request's method, such as "POST".
	Method string
	// Target is the path and query the client asked for, with credential values redacted.
	Target string
	// Header holds the request's headers, with credential values redacted.
	Header map[string][]string
	// Body is the body the client sent, or its first bytes when it was larger than the room
	// left under the bound (see BodySize).
	Body []byte
	// BodySize is the size of the whole body the client sent: larger than len(Body) when only
	// its first bytes are kept.
	BodySize int64
	// Truncated reports that something (headers, the target's end or the body's end) was left
	// out to keep the request within its bound.
	Truncated bool
}

// Equal reports whether r and o are the same request: same method, target, headers (values
// in the same order), body bytes (a nil and an empty body are equal), size and truncation.
func (r *Request) Equal(o *Request) bool {
	if r == nil || o == nil {
		return r == o
	}
	if r.Method != o.Method || r.Target != o.Target || r.BodySize != o.BodySize || r.Truncated != o.Truncated ||
		!bytes.Equal(r.Body, o.Body) || len(r.Header) != len(o.Header) {
		return false
	}
	for k, v := range r.Header {
		ov, ok := o.Header[k]
		if !ok || !slices.Equal(v, ov) {
			return false
		}
	}
	return true
}

// Clone returns a deep copy of r (nil for nil): it shares no map, slice or array with r.
func (r *Request) Clone() *Request {
	if r == nil {
		return nil
	}
	c := *r
	if r.Header != nil {
		c.Header = make(map[string][]string, len(r.Header))
		for k, v := range r.Header {
			c.Header[k] = slices.Clone(v)
		}
	}
	if r.Body != nil {
		c.Body = bytes.Clone(r.Body)
	}
	return &c
}
