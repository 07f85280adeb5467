package storekit

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

// The request encoding: every store keeps a retained request (idem.Record.Request) as the one
// blob EncodeRequest returns, so every backend stores the same bytes and its size is known
// before it is stored (RequestLen, FitRequest).
//
//	version 1: 0x01 · flags (bit 0: truncated) · uvarint body size · uvarint len, method ·
//	           uvarint len, target · uvarint #headers · per header: uvarint len, name,
//	           uvarint #values, per value: uvarint len, value · the kept body bytes (the rest)
const requestV1 = 1

// RequestLen is the length of EncodeRequest(r).
func RequestLen(r idem.Request) int {
	n := 2 + uvarintLen(uint64(r.BodySize)) + uvarintLen(uint64(len(r.Method))) + len(r.Method) +
		uvarintLen(uint64(len(r.Target))) + len(r.Target) + uvarintLen(uint64(len(r.Header))) + len(r.Body)
	for k, vs := range r.Header {
		n += headerLen(k, vs)
	}
	return n
}

// headerLen is the length of one header's encoding.
func headerLen(name string, values []string) int {
	n := uvarintLen(uint64(len(name))) + len(name) + uvarintLen(uint64(len(values)))
	for _, v := range values {
		n += uvarintLen(uint64(len(v))) + len(v)
	}
	return n
}

// EncodeRequest returns the versioned binary encoding of r. Header names are written in sorted
// order, so equal requests encode to equal bytes. A negative BodySize is written as 0.
func EncodeRequest(r idem.Request) []byte {
	hs := make([]header, 0, len(r.Header))
	for k, vs := range r.Header {
		hs = append(hs, header{k, vs})
	}
	sortHeaders(hs)
	b := make([]byte, 0, RequestLen(r))
	var flags byte
	if r.Truncated {
		flags |= 1
	}
	b = append(b, requestV1, flags)
	b = binary.AppendUvarint(b, uint64(max(r.BodySize, 0)))
	b = binary.AppendUvarint(b, uint64(len(r.Method)))
	b = append(b, r.Method...)
	b = binary.AppendUvarint(b, uint64(len(r.Target)))
	b = append(b, r.Target...)
	b = binary.AppendUvarint(b, uint64(len(hs)))
	for _, h := range hs {
		b = binary.AppendUvarint(b, uint64(len(h.name)))
		b = append(b, h.name...)
		b = binary.AppendUvarint(b, uint64(len(h.values)))
		for _, v := range h.values {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, r.Body...)
}

// DecodeRequest decodes what EncodeRequest wrote, of any version this release knows. Bad input
// returns an error wrapping idem.ErrCorruptRecord, never a panic. Nothing of b is kept.
func DecodeRequest(b []byte) (idem.Request, error) {
	var r idem.Request
	if len(b) < 2 {
		return r, corruptRequest("too short")
	}
	if b[0] != requestV1 {
		return r, corruptRequest(fmt.Sprintf("unknown version %d", b[0]))
	}
	if b[1]&^1 != 0 {
		return r, corruptRequest("unknown flags")
	}
	r.Truncated = b[1]&1 != 0
	d := decoder{b: b[2:]}
	size := d.uvarint()
	if size > math.MaxInt64 {
		return idem.Request{}, corruptRequest("body size out of range")
	}
	r.BodySize = int64(size)
	r.Method = d.str()
	r.Target = d.str()
	n := d.count()
	if n > 0 && d.why == "" {
		r.Header = make(map[string][]string, n)
	}
	for i := 0; i < n && d.why == ""; i++ {
		k := d.str()
		nv := d.count()
		vs := make([]string, 0, nv)
		for j := 0; j < nv && d.why == ""; j++ {
			vs = append(vs, d.str())
		}
		if _, dup := r.Header[k]; dup && d.why == "" {
			d.why = "duplicate header " + k
		}
		r.Header[k] = vs
	}
	if d.why == "" && int64(len(d.b)) > r.BodySize {
		d.why = "body longer than its size"
	}
	if d.why != "" {
		return idem.Request{}, corruptRequest(strings.Clone(d.why))
	}
	if len(d.b) > 0 {
		r.Body = append([]byte(nil), d.b...)
	}
	return r, nil
}

func corruptRequest(why string) error {
	return fmt.Errorf("%w: request: %s", idem.ErrCorruptRecord, why)
}

// FitRequest returns r cut so that its encoding (EncodeRequest) is at most limit bytes: the
// method, the target and the headers in sorted order of names are kept while they fit (a
// target that does not is cut at a UTF-8 boundary; a header that does not is left out whole),
// then as much of the body as the room left holds. Whatever is left out sets Truncated;
// BodySize is kept. A limit too small for even the method gives nil. r itself is not changed:
// the result shares no map with it, though its strings and body share r's bytes.
func FitRequest(r idem.Request, limit int) *idem.Request {
	out := idem.Request{Method: r.Method, BodySize: max(r.BodySize, int64(len(r.Body))), Truncated: r.Truncated}
	room := limit - (2 + uvarintLen(uint64(out.BodySize)) + uvarintLen(uint64(len(r.Method))) + len(r.Method) + 1 + 1)
	if room < 0 { // not even the method, an empty target and no headers
		return nil
	}
	// The target: its length's varint grows with it; cut it to what the room holds.
	target := r.Target
	for len(target) > 0 && uvarintLen(uint64(len(target)))-1+len(target) > room {
		cut := min(len(target)-1, room)
		for cut > 0 && !utf8.RuneStart(target[cut]) {
			cut--
		}
		target = target[:cut]
	}
	if len(target) < len(r.Target) {
		out.Truncated = true
	}
	out.Target = target
	room -= uvarintLen(uint64(len(target))) - 1 + len(target)
	names := make([]header, 0, len(r.Header))
	for k, vs := range r.Header {
		names = append(names, header{k, vs})
	}
	sortHeaders(names)
	kept := 0
	for _, h := range names {
		// Room for this header and for the header count's varint, which may grow by a byte.
		need := headerLen(h.name, h.values) + uvarintLen(uint64(kept+1)) - uvarintLen(uint64(kept))
		if need > room {
			out.Truncated = true
			continue
		}
		if out.Header == nil {
			out.Header = make(map[string][]string, len(r.Header))
		}
		out.Header[h.name] = h.values
		kept++
		room -= need
	}
	body := r.Body
	if len(body) > room {
		body, out.Truncated = body[:room], true
	}
	if out.BodySize > int64(len(body)) && int64(len(r.Body)) < out.BodySize {
		out.Truncated = true // the caller kept only a prefix already
	}
	out.Body = body
	return &out
}
