package idemfiber

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/gofiber/fiber/v2"
)

// fingerprint is idemhttp.RawFingerprint for a Fiber request: the hex SHA-256 of the method,
// the path, the query and the body, each prefixed by its length, as idem.Fingerprint lays
// them out. Requests up to 512 bytes of those are laid out on the stack.
func fingerprint(c *fiber.Ctx) string {
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
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], sum[:])
	return string(out[:])
}
