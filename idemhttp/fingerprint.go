package idemhttp

import (
	"crypto/sha256"
	"encoding/binary"
	"net/http"
)

// A FingerprintFunc identifies a request's payload: the same key sent with another fingerprint
// is answered 422 (ProblemMismatch) and has no effect. It gets the request and its body (read
// and bounded by Options.MaxRequestBody; r.Body must not be read) and returns an
// idem.Fingerprint-style hex SHA-256 (idem.ValidFingerprint). An error answers 400.
type FingerprintFunc func(r *http.Request, body []byte) (string, error)

// RawFingerprint, the default, fingerprints the method, the path, the query and the body bytes
// as they are. It equals idem.Fingerprint([]byte(r.Method), []byte(r.URL.Path),
// []byte(r.URL.RawQuery), body).
func RawFingerprint(r *http.Request, body []byte) (string, error) {
	return fingerprint(r, body), nil
}

// JSONFingerprint fingerprints the method, the path, the query and the body canonicalised by
// CanonicalJSON with the given ignored fields, so that two bodies that differ only in member
// order, whitespace, number forms, string escapes or the ignored fields (a timestamp that
// changes between retries) are the same request. A body that is not JSON (or is empty) is
// fingerprinted raw, distinctly from any JSON body.
func JSONFingerprint(ignore ...string) FingerprintFunc {
	tree := newIgnoreTree(ignore)
	return func(r *http.Request, body []byte) (string, error) {
		buf := getBuf()
		defer putBuf(buf)
		canon, err := appendCanonical((*buf)[:0], body, tree)
		if err != nil {
			// Not JSON: the raw bytes, marked so no JSON body can collide with them.
			return fingerprintParts(r, []byte("raw"), body), nil
		}
		*buf = canon
		return fingerprintParts(r, []byte("json"), canon), nil
	}
}

// fingerprint is idem.Fingerprint(method, path, query, body) without its allocations but the
// result: the length-prefixed parts are laid out in a pooled buffer and hashed in one call.
func fingerprint(r *http.Request, body []byte) string {
	return fingerprintParts(r, nil, body)
}

// fingerprintParts hashes method, path, query, then mode (if not nil) and body.
func fingerprintParts(r *http.Request, mode, body []byte) string {
	n := 40 + len(r.Method) + len(r.URL.Path) + len(r.URL.RawQuery) + len(mode) + len(body)
	if n <= 512 {
		// Most requests: lay the parts out on the stack, not in a pooled buffer.
		var small [512]byte
		fp, _ := hashParts(small[:0], r, mode, body)
		return fp
	}
	buf := getBuf()
	fp, b := hashParts((*buf)[:0], r, mode, body)
	*buf = b // keep the grown buffer
	putBuf(buf)
	return fp
}

// hashParts lays the parts out in b and returns their hex SHA-256, and b.
func hashParts(b []byte, r *http.Request, mode, body []byte) (string, []byte) {
	b = appendPart(b, r.Method)
	b = appendPart(b, r.URL.Path)
	b = appendPart(b, r.URL.RawQuery)
	if mode != nil {
		b = binary.BigEndian.AppendUint64(b, uint64(len(mode)))
		b = append(b, mode...)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	b = append(b, body...)
	sum := sha256.Sum256(b)
	var out [2 * sha256.Size]byte
	for i := 0; i < sha256.Size; i += 4 {
		binary.BigEndian.PutUint64(out[2*i:], hex8(binary.BigEndian.Uint32(sum[i:])))
	}
	return string(out[:]), b
}

// hex8 returns the eight lowercase hex digits of x, the first in its most significant byte:
// hex.Encode without a table lookup per byte.
func hex8(x uint32) uint64 {
	const ones = 0x0101010101010101
	// One nibble per byte, the last nibble of x in the low byte.
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	v = (v | v<<8) & 0x00ff00ff00ff00ff
	v = (v | v<<4) & 0x0f0f0f0f0f0f0f0f
	// '0'+n, and 'a'-'0'-10 more where n > 9 (n+6 reaches 16).
	letters := (v + 6*ones) >> 4 & ones
	return v + '0'*ones + letters*('a'-'0'-10)
}

func appendPart(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}
