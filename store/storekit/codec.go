package storekit

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/idemkit/idem"
)

// The response encoding: stores that keep a response as one blob use EncodeResponse and
// DecodeResponse, so every backend stores the same bytes and later releases still read records
// written by earlier ones.
//
//	version 1: 0x01 · flags (bit 0: body omitted) · uvarint status ·
//	           uvarint #headers · per header: uvarint len, name, uvarint #values, per value:
//	           uvarint len, value · the body bytes (the rest)
const codecV1 = 1

// EncodeResponse returns the versioned binary encoding of r. Header names are written in
// sorted order, so equal responses encode to equal bytes.
func EncodeResponse(r idem.Response) []byte { return AppendResponse(nil, r) }

// AppendResponse appends the encoding EncodeResponse returns to b and returns the extended
// slice. If b has not the room, it is copied once to an allocation of the exact size needed,
// so a store that keeps the encoding behind other bytes (its key) makes one allocation for both.
func AppendResponse(b []byte, r idem.Response) []byte {
	// One pass over the map collects the headers (no second lookup per name) and the exact
	// size, so the result is one allocation of the right size. Responses rarely carry more
	// than a few headers: those sort on the stack.
	var small [8]header
	hs := small[:0]
	size := 2 + uvarintLen(uint64(r.Status)) + uvarintLen(uint64(len(r.Header))) + len(r.Body)
	for k, vs := range r.Header {
		hs = append(hs, header{k, vs})
		size += uvarintLen(uint64(len(k))) + len(k) + uvarintLen(uint64(len(vs)))
		for _, v := range vs {
			size += uvarintLen(uint64(len(v))) + len(v)
		}
	}
	sortHeaders(hs)
	if cap(b)-len(b) < size {
		nb := make([]byte, len(b), len(b)+size) // exact: a store keeps it as it is
		copy(nb, b)
		b = nb
	}
	b = append(b, codecV1)
	var flags byte
	if r.BodyOmitted {
		flags |= 1
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(r.Status))
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

// header is one header of a response being encoded.
type header struct {
	name   string
	values []string
}

// sortHeaders sorts hs by name: by insertion for the usual few, else slices.SortFunc.
func sortHeaders(hs []header) {
	if len(hs) > 12 {
		slices.SortFunc(hs, func(a, b header) int { return strings.Compare(a.name, b.name) })
		return
	}
	for i := 1; i < len(hs); i++ {
		for j := i; j > 0 && hs[j].name < hs[j-1].name; j-- {
			hs[j], hs[j-1] = hs[j-1], hs[j]
		}
	}
}

// uvarintLen is the length of binary.AppendUvarint's encoding of v.
func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// DecodeResponse decodes what EncodeResponse wrote, of any version this release knows. Bad
// input returns an error wrapping idem.ErrCorruptRecord, never a panic. The body is copied out of b.
func DecodeResponse(b []byte) (idem.Response, error) {
	var r idem.Response
	if len(b) < 2 {
		return r, corrupt("too short")
	}
	if b[0] != codecV1 {
		return r, corrupt(fmt.Sprintf("unknown version %d", b[0]))
	}
	if b[1]&^1 != 0 {
		return r, corrupt("unknown flags")
	}
	r.BodyOmitted = b[1]&1 != 0
	d := decoder{b: b[2:]}
	status := d.uvarint()
	if status > 999 {
		return r, corrupt("status out of range")
	}
	r.Status = int(status)
	n := d.count()
	if n > 0 {
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
	if d.why != "" {
		// A copy, so that the error holds nothing of d: then b does not escape, and a caller
		// may pass a []byte converted from a string without a copy.
		return idem.Response{}, corrupt(strings.Clone(d.why))
	}
	if len(d.b) > 0 {
		r.Body = append([]byte(nil), d.b...)
	}
	return r, nil
}

func corrupt(why string) error { return fmt.Errorf("%w: %s", idem.ErrCorruptRecord, why) }

type decoder struct {
	b   []byte
	why string // what is wrong with the input; "" while it decodes
}

func (d *decoder) uvarint() uint64 {
	if d.why != "" {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.why = "bad varint"
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length that must fit in what is left of the input.
func (d *decoder) count() int {
	v := d.uvarint()
	if d.why == "" && v > uint64(len(d.b)) {
		d.why = "length beyond end of input"
		return 0
	}
	return int(v)
}

func (d *decoder) str() string {
	n := d.count()
	if d.why != "" {
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
