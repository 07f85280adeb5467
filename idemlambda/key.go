package idemlambda

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
)

// How a value found in an event becomes a key. Two events share a key only if the values at
// the key path are the same JSON value, so the encoding is injective and tells types apart:
//
//	a string not starting with '#'    the string itself ("order-1")
//	any other string                  "#str:" and the string
//	a number                          "#num:" and its canonical form (5, 5.0 and 5e0 are one number)
//	true, false                       "#bool:true", "#bool:false"
//	an object or an array             "#json:" and its canonical JSON (fields sorted, numbers canonical)
//	several paths (Options.KeyPaths)  "#tuple:" and each part's encoding, each preceded by its length
//
// An encoding that does not fit a storage key (too long, or holding a NUL) is replaced by
// "#sha256:" and the hex SHA-256 of it. Every encoding but a plain string starts with '#', and
// each tag ends with ':', so no two kinds meet.
//
// A value that carries nothing is no key: null, "", an object or an array all of whose members
// carry nothing ({}, [], [null, null]). Such an event has no key: its handler runs without
// protection, or fails with ErrMissingKey when Options.RequireKey is set.

// empty reports whether v carries nothing: null, "", or an object or array whose members all
// carry nothing.
func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case string:
		return x == ""
	case map[string]any:
		for _, m := range x {
			if !empty(m) {
				return false
			}
		}
		return true
	case []any:
		for _, m := range x {
			if !empty(m) {
				return false
			}
		}
		return true
	}
	return false
}

// encodeKey is the injective encoding of a value that is not empty.
func encodeKey(v any) string {
	switch x := v.(type) {
	case string:
		if !strings.HasPrefix(x, "#") {
			return x
		}
		return "#str:" + x
	case json.Number:
		return "#num:" + canonNumber(string(x))
	case bool:
		return "#bool:" + strconv.FormatBool(x)
	}
	var b strings.Builder
	b.WriteString("#json:")
	canonJSON(&b, v)
	return b.String()
}

// encodeTuple is the injective encoding of the values found at several paths, none empty.
func encodeTuple(vs []any) string {
	var b strings.Builder
	b.WriteString("#tuple:")
	for _, v := range vs {
		e := encodeKey(v)
		b.WriteString(strconv.Itoa(len(e)))
		b.WriteByte(':')
		b.WriteString(e)
	}
	return b.String()
}

// storageKey is name, '|' and the encoded key, or the encoding's SHA-256 when it does not fit
// a storage key.
func storageKey(name, enc string) string {
	k := name + "|" + enc
	if idem.CheckKey(k) != nil {
		sum := sha256.Sum256([]byte(enc))
		k = name + "|#sha256:" + hex.EncodeToString(sum[:])
	}
	return k
}

// canonJSON writes v (as decoded with UseNumber) as JSON with object fields sorted, numbers in
// canonical form and strings escaped one way.
func canonJSON(b *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case json.Number:
		b.WriteString(canonNumber(string(x)))
	case string:
		writeString(b, x)
	case []any:
		b.WriteByte('[')
		for i, m := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			canonJSON(b, m)
		}
		b.WriteByte(']')
	case map[string]any:
		names := make([]string, 0, len(x))
		for n := range x {
			names = append(names, n)
		}
		slices.Sort(names)
		b.WriteByte('{')
		for i, n := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, n)
			b.WriteByte(':')
			canonJSON(b, x[n])
		}
		b.WriteByte('}')
	}
}

// writeString writes s as a JSON string: '"' and '\' escaped, control characters as \u00XX,
// everything else as it is (a decoded string is valid UTF-8).
func writeString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

// canonNumber is the one form of the number written as n (JSON number syntax): equal numbers
// (5, 5.0, 50e-1, -0 and 0) have one form, different numbers different forms. With the value
// written as d × 10^e, d an integer without trailing zeros: "0" for zero; an integer with at
// most 21 digits as its digits ("50"); a number with a fraction and at most 21 significant
// places as a decimal ("0.05"); anything else as d, 'e' and e ("5e300", "-12e-40"). The three
// shapes are told apart by '.' and 'e', and within each shape the value determines the text.
func canonNumber(n string) string {
	neg := strings.HasPrefix(n, "-")
	n = strings.TrimPrefix(n, "-")
	mant, exp, _ := strings.Cut(strings.ToLower(n), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	e := new(big.Int)
	if exp != "" {
		if _, ok := e.SetString(strings.TrimPrefix(exp, "+"), 10); !ok {
			return "!" + n // not JSON number syntax; never produced by the decoder
		}
	}
	e.Sub(e, big.NewInt(int64(len(frac))))
	trimmed := strings.TrimRight(digits, "0")
	e.Add(e, big.NewInt(int64(len(digits)-len(trimmed))))
	digits = trimmed
	if digits == "" {
		return "0"
	}
	sign := ""
	if neg {
		sign = "-"
	}
	if e.IsInt64() {
		switch x := e.Int64(); {
		case x >= 0 && int64(len(digits))+x <= 21:
			return sign + digits + strings.Repeat("0", int(x))
		case x < 0 && -x <= 21 && int64(len(digits)) <= 21:
			places := int(-x)
			if places >= len(digits) {
				return sign + "0." + strings.Repeat("0", places-len(digits)) + digits
			}
			return sign + digits[:len(digits)-places] + "." + digits[len(digits)-places:]
		}
	}
	return sign + digits + "e" + e.String()
}
