package idemfiber

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"unsafe"

	"github.com/gofiber/fiber/v2"

	"github.com/idemkit/idem"
)

// fingerprint is idemhttp.RawFingerprint for a Fiber request: the hex SHA-256 of the method,
// the path, the query and the body, each prefixed by its length, as idem.Fingerprint lays
// them out.
func fingerprint(c *fiber.Ctx) string {
	_, fp := keyAndFingerprint(c, "", "")
	return fp
}

// keyAndFingerprint returns the storage key of key in scope (idem.ScopedKey) and the
// request's fingerprint, in one allocation: the fingerprint's digits, then the storage key.
// Requests up to 512 bytes of method, path, query and body are laid out on the stack.
func keyAndFingerprint(c *fiber.Ctx, scope, key string) (storageKey, fp string) {
	req := c.Request()
	method, path, query, body := req.Header.Method(), c.Path(), req.URI().QueryString(), req.Body()
	var small [512]byte
	b := small[:0]
	if n := 32 + len(method) + len(path) + len(query) + len(body); n > len(small) {
		b = make([]byte, 0, n)
	}
	b = binary.BigEndian.AppendUint64(b, uint64(len(method)))
	b = append(b, method...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(path)))
	b = append(b, path...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(query)))
	b = append(b, query...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(body)))
	b = append(b, body...)
	sum := sha256.Sum256(b)
	out := make([]byte, 2*sha256.Size, 2*sha256.Size+len(scope)+1+len(key))
	hex.Encode(out, sum[:])
	out = append(append(append(out, scope...), idem.ScopeSeparator), key...)
	s := unsafe.String(unsafe.SliceData(out), len(out)) // out is not used again
	return s[2*sha256.Size:], s[:2*sha256.Size]
}
