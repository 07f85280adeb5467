package idemhttp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"net/http"
	"sync"
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

type hasher struct {
	h   hash.Hash
	sum [sha256.Size]byte
	hex [2 * sha256.Size]byte
}

var hashers = sync.Pool{New: func() any { return &hasher{h: sha256.New()} }}

// fingerprint is idem.Fingerprint(method, path, query, body) without its allocations.
func fingerprint(r *http.Request, body []byte) string {
	hs := hashers.Get().(*hasher)
	h := hs.h
	h.Reset()
	writePart(h, r.Method)
	writePart(h, r.URL.Path)
	writePart(h, r.URL.RawQuery)
	writeBytes(h, body)
	s := hs.done()
	hashers.Put(hs)
	return s
}

func fingerprintParts(r *http.Request, mode, body []byte) string {
	hs := hashers.Get().(*hasher)
	h := hs.h
	h.Reset()
	writePart(h, r.Method)
	writePart(h, r.URL.Path)
	writePart(h, r.URL.RawQuery)
	writeBytes(h, mode)
	writeBytes(h, body)
	s := hs.done()
	hashers.Put(hs)
	return s
}

func (hs *hasher) done() string {
	hex.Encode(hs.hex[:], hs.h.Sum(hs.sum[:0]))
	return string(hs.hex[:])
}

func writePart(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	if hs, ok := h.(interface{ WriteString(string) (int, error) }); ok {
		hs.WriteString(s)
	} else {
		h.Write([]byte(s))
	}
}

func writeBytes(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}
