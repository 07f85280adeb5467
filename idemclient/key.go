package idemclient

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"time"
)

type keyCtx struct{}

// WithKey returns a context that makes the Transport send key as the Idempotency-Key of the
// request it carries, on every attempt. Use it to tie a request to an intent stored with the
// user's action, so a retry after a restart reuses the key. A key already set on the request's
// header takes precedence.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyCtx{}, key)
}

// KeyFrom returns the key set by WithKey, if any.
func KeyFrom(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(keyCtx{}).(string)
	return k, ok && k != ""
}

// IntentKey derives a stable idempotency key from a secret and the parts that identify the
// intent, e.g. IntentKey(secret, "charge", orderID, "attempt-1"). The same inputs always give the
// same key, so every process that retries the intent sends the same key; the secret keeps keys
// unguessable by other tenants. Parts are length-prefixed, so ("ab","c") and ("a","bc") differ.
// The key is 43 characters of unpadded base64url.
func IntentKey(secret []byte, parts ...string) string {
	m := hmac.New(sha256.New, secret)
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		m.Write(n[:])
		m.Write([]byte(p))
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// NewKey returns a fresh UUIDv7 (RFC 9562): 48 bits of Unix milliseconds then 74 random bits,
// so keys sort by creation time in a store's index.
func NewKey() string {
	var u [16]byte
	_, _ = rand.Read(u[6:]) // crypto/rand.Read never fails
	ms := uint64(time.Now().UnixMilli())
	u[0], u[1], u[2], u[3], u[4], u[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	u[6] = 0x70 | u[6]&0x0f // version 7
	u[8] = 0x80 | u[8]&0x3f // variant 10
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}
