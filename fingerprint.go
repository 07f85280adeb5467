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
	// Eight bytes at a time, without a branch per byte: this runs on every request. For a byte
	// b below 0x80, b+(0x80-lo) has its top bit set when b >= lo, and b+(0x7f-hi) when b > hi;
	// no sum carries into the next byte.
	const ones, tops = 0x0101010101010101, 0x8080808080808080
	ge := func(x uint64, lo uint64) uint64 { return x + (0x80-lo)*ones }
	gt := func(x uint64, hi uint64) uint64 { return x + (0x7f-hi)*ones }
	var bad uint64
	for i := 0; i < FingerprintLen; i += 8 {
		x := binary.LittleEndian.Uint64([]byte(fp[i : i+8]))
		digit := ge(x, '0') &^ gt(x, '9')
		lower := ge(x, 'a') &^ gt(x, 'f')
		bad |= x | ^(digit | lower)
	}
	return bad&tops == 0
}
