package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// FingerprintLen is the length of a fingerprint: hex SHA-256.
const FingerprintLen = 64

// Fingerprint returns the hex SHA-256 of parts, each length-prefixed so that different splits
// of the same bytes ("ab","c" and "a","bc") give different fingerprints. HTTP uses method,
// route and body; consumers typically the message body.
func Fingerprint(parts ...[]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// ValidFingerprint reports whether fp is 64 lowercase hex digits.
func ValidFingerprint(fp string) bool {
	if len(fp) != FingerprintLen {
		return false
	}
	var bad byte
	for i := 0; i < len(fp); i++ {
		bad |= notLowerHex[fp[i]] // no branch per byte: this runs on every request
	}
	return bad == 0
}

// notLowerHex is 1 for every byte that is not a lowercase hex digit.
var notLowerHex = func() (t [256]byte) {
	for c := range t {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			t[c] = 1
		}
	}
	return t
}()
