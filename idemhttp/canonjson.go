package idemhttp

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrInvalidJSON reports a body that CanonicalJSON cannot canonicalise: not JSON (RFC 8259),
// nested deeper than MaxJSONDepth, an object with a repeated member name, a string that is not
// valid UTF-8 or holds a lone surrogate, or an exponent beyond 15 digits.
var ErrInvalidJSON = errors.New("idemhttp: invalid JSON")

// MaxJSONDepth is the deepest nesting of arrays and objects CanonicalJSON accepts.
const MaxJSONDepth = 256

// CanonicalJSON returns a canonical form of the JSON document b, so that two documents that
// mean the same get the same bytes:
//   - insignificant whitespace is removed;
//   - object members are sorted by name (the bytes of their canonical encoding);
//   - strings are decoded and re-encoded with the fewest escapes: only `"`, `\` and control
//     characters are escaped, control characters as \u00XX;
//   - numbers keep their exact decimal value, written as digits with trailing zeros moved to
//     an exponent (1, 1.0, 1e0 and 10e-1 all become 1; 100 becomes 1e2; -0 becomes 0);
//   - members named by ignore are left out. A path is dotted ("meta.sent_at"); it passes
//     through arrays, so "items.ts" drops ts from every object in the array items.
//
// It returns an error wrapping ErrInvalidJSON, never a panic, for input it cannot handle.
func CanonicalJSON(b []byte, ignore ...string) ([]byte, error) {
	return appendCanonical(nil, b, newIgnoreTree(ignore))
}

func appendCanonical(out, b []byte, ign *ignoreNode) ([]byte, error) {
	d := jsonDecoder{b: b}
	d.ws()
	out, err := d.value(out, ign, 0)
	if err != nil {
		return nil, err
	}
	d.ws()
	if d.i != len(d.b) {
		return nil, d.errorf("data after the document")
	}
	return out, nil
}

// ignoreNode is a trie of dotted paths to leave out.
type ignoreNode struct {
	drop     bool
	children map[string]*ignoreNode
}

func newIgnoreTree(paths []string) *ignoreNode {
	if len(paths) == 0 {
		return nil
	}
	root := &ignoreNode{}
	for _, p := range paths {
		n := root
		for _, seg := range strings.Split(p, ".") {
			if n.children == nil {
				n.children = make(map[string]*ignoreNode)
			}
			c := n.children[seg]
			if c == nil {
				c = &ignoreNode{}
				n.children[seg] = c
			}
			n = c
		}
		n.drop = true
	}
	return root
}

func (n *ignoreNode) child(name []byte) *ignoreNode {
	if n == nil || n.children == nil {
		return nil
	}
	return n.children[string(name)] // no allocation: the compiler converts in place for lookups
}

type jsonDecoder struct {
	b []byte
	i int
}

func (d *jsonDecoder) errorf(what string) error {
	return errors.Join(ErrInvalidJSON, errors.New(what+" at offset "+strconv.Itoa(d.i)))
}

func (d *jsonDecoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *jsonDecoder) value(out []byte, ign *ignoreNode, depth int) ([]byte, error) {
	if d.i >= len(d.b) {
		return nil, d.errorf("unexpected end")
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(out, ign, depth+1)
	case c == '[':
		return d.array(out, ign, depth+1)
	case c == '"':
		return d.str(out)
	case c == '-' || ('0' <= c && c <= '9'):
		return d.number(out)
	case c == 't':
		return d.literal(out, "true")
	case c == 'f':
		return d.literal(out, "false")
	case c == 'n':
		return d.literal(out, "null")
	}
	return nil, d.errorf("unexpected character")
}

func (d *jsonDecoder) literal(out []byte, lit string) ([]byte, error) {
	if !bytes.HasPrefix(d.b[d.i:], []byte(lit)) {
		return nil, d.errorf("bad literal")
	}
	d.i += len(lit)
	return append(out, lit...), nil
}

type span struct{ start, keyEnd, end int }

func (d *jsonDecoder) object(out []byte, ign *ignoreNode, depth int) ([]byte, error) {
	if depth > MaxJSONDepth {
		return nil, d.errorf("nesting too deep")
	}
	d.i++ // {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return append(out, '{', '}'), nil
	}
	base := len(out)
	var spans []span
	for {
		d.ws()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, d.errorf("expected a member name")
		}
		start := len(out)
		var err error
		if out, err = d.str(out); err != nil {
			return nil, err
		}
		keyEnd := len(out)
		d.ws()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, d.errorf("expected ':'")
		}
		d.i++
		d.ws()
		// The name without its quotes, for the ignore lookup. Canonical strings escape only
		// '"', '\' and control characters, which a path cannot usefully contain.
		child := ign.child(out[start+1 : keyEnd-1])
		if out, err = d.value(out, child, depth); err != nil {
			return nil, err
		}
		if child != nil && child.drop {
			out = out[:start]
		} else {
			spans = append(spans, span{start, keyEnd, len(out)})
		}
		d.ws()
		if d.i >= len(d.b) {
			return nil, d.errorf("unexpected end in an object")
		}
		if d.b[d.i] == ',' {
			d.i++
			continue
		}
		if d.b[d.i] != '}' {
			return nil, d.errorf("expected ',' or '}'")
		}
		d.i++
		break
	}
	key := func(s span) []byte { return out[s.start:s.keyEnd] }
	sorted := slices.IsSortedFunc(spans, func(a, b span) int { return bytes.Compare(key(a), key(b)) })
	if !sorted {
		slices.SortFunc(spans, func(a, b span) int { return bytes.Compare(key(a), key(b)) })
	}
	for i := 1; i < len(spans); i++ {
		if bytes.Equal(key(spans[i-1]), key(spans[i])) {
			return nil, d.errorf("repeated member name")
		}
	}
	// Reassemble the members, in order, with separators.
	tmp := make([]byte, 0, len(out)-base+len(spans)+2)
	tmp = append(tmp, '{')
	for i, s := range spans {
		if i > 0 {
			tmp = append(tmp, ',')
		}
		tmp = append(tmp, out[s.start:s.keyEnd]...)
		tmp = append(tmp, ':')
		tmp = append(tmp, out[s.keyEnd:s.end]...)
	}
	tmp = append(tmp, '}')
	return append(out[:base], tmp...), nil
}

func (d *jsonDecoder) array(out []byte, ign *ignoreNode, depth int) ([]byte, error) {
	if depth > MaxJSONDepth {
		return nil, d.errorf("nesting too deep")
	}
	d.i++ // [
	out = append(out, '[')
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return append(out, ']'), nil
	}
	for first := true; ; first = false {
		if !first {
			out = append(out, ',')
		}
		d.ws()
		var err error
		if out, err = d.value(out, ign, depth); err != nil {
			return nil, err
		}
		d.ws()
		if d.i >= len(d.b) {
			return nil, d.errorf("unexpected end in an array")
		}
		if d.b[d.i] == ',' {
			d.i++
			continue
		}
		if d.b[d.i] != ']' {
			return nil, d.errorf("expected ',' or ']'")
		}
		d.i++
		return append(out, ']'), nil
	}
}

const hexDigits = "0123456789abcdef"

// str decodes a string at d.i and appends its canonical encoding.
func (d *jsonDecoder) str(out []byte) ([]byte, error) {
	d.i++ // opening quote
	out = append(out, '"')
	for {
		if d.i >= len(d.b) {
			return nil, d.errorf("unterminated string")
		}
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return append(out, '"'), nil
		case c < 0x20:
			return nil, d.errorf("control character in a string")
		case c == '\\':
			var r rune
			if d.i+1 >= len(d.b) {
				return nil, d.errorf("unterminated escape")
			}
			switch e := d.b[d.i+1]; e {
			case '"', '\\', '/':
				r = rune(e)
				d.i += 2
			case 'b':
				r, d.i = '\b', d.i+2
			case 'f':
				r, d.i = '\f', d.i+2
			case 'n':
				r, d.i = '\n', d.i+2
			case 'r':
				r, d.i = '\r', d.i+2
			case 't':
				r, d.i = '\t', d.i+2
			case 'u':
				u, ok := d.hex4(d.i + 2)
				if !ok {
					return nil, d.errorf("bad \\u escape")
				}
				d.i += 6
				r = rune(u)
				if utf16.IsSurrogate(r) {
					u2, ok := uint16(0), false
					if d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
						u2, ok = d.hex4(d.i + 2)
					}
					r = utf16.DecodeRune(r, rune(u2))
					if !ok || r == utf8.RuneError {
						return nil, d.errorf("lone surrogate")
					}
					d.i += 6
				}
			default:
				return nil, d.errorf("bad escape")
			}
			out = appendRune(out, r)
		case c < utf8.RuneSelf:
			out = appendRune(out, rune(c))
			d.i++
		default:
			r, n := utf8.DecodeRune(d.b[d.i:])
			if r == utf8.RuneError && n <= 1 {
				return nil, d.errorf("invalid UTF-8")
			}
			out = append(out, d.b[d.i:d.i+n]...)
			d.i += n
		}
	}
}

func (d *jsonDecoder) hex4(at int) (uint16, bool) {
	if at+4 > len(d.b) {
		return 0, false
	}
	var v uint16
	for _, c := range d.b[at : at+4] {
		v <<= 4
		switch {
		case '0' <= c && c <= '9':
			v |= uint16(c - '0')
		case 'a' <= c && c <= 'f':
			v |= uint16(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			v |= uint16(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

// appendRune appends r as it appears inside a canonical string.
func appendRune(out []byte, r rune) []byte {
	switch {
	case r == '"' || r == '\\':
		return append(out, '\\', byte(r))
	case r < 0x20:
		return append(out, '\\', 'u', '0', '0', hexDigits[r>>4], hexDigits[r&0xf])
	}
	return utf8.AppendRune(out, r)
}

// number parses an RFC 8259 number and appends its canonical form: an optional '-', the
// significant digits without leading or trailing zeros, and "e" and the exponent if not 0.
func (d *jsonDecoder) number(out []byte) ([]byte, error) {
	b := d.b
	i := d.i
	neg := false
	if b[i] == '-' {
		neg = true
		i++
	}
	intStart := i
	if i < len(b) && b[i] == '0' {
		i++
	} else {
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	}
	if i == intStart {
		d.i = i
		return nil, d.errorf("bad number")
	}
	intDigits := b[intStart:i]
	var frac []byte
	if i < len(b) && b[i] == '.' {
		i++
		fs := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == fs {
			d.i = i
			return nil, d.errorf("bad fraction")
		}
		frac = b[fs:i]
	}
	var exp int64
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		eneg := false
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			eneg = b[i] == '-'
			i++
		}
		es := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == es {
			d.i = i
			return nil, d.errorf("bad exponent")
		}
		digits := bytes.TrimLeft(b[es:i], "0")
		if len(digits) > 15 {
			d.i = es
			return nil, d.errorf("exponent too large")
		}
		for _, c := range digits {
			exp = exp*10 + int64(c-'0')
		}
		if eneg {
			exp = -exp
		}
	}
	d.i = i
	// Significant digits: intDigits then frac, without leading zeros; trailing zeros go to exp.
	exp -= int64(len(frac))
	lead := 0
	all := len(intDigits) + len(frac)
	at := func(k int) byte {
		if k < len(intDigits) {
			return intDigits[k]
		}
		return frac[k-len(intDigits)]
	}
	for lead < all && at(lead) == '0' {
		lead++
	}
	if lead == all {
		return append(out, '0'), nil // zero, whatever its sign and exponent
	}
	end := all
	for at(end-1) == '0' {
		end--
		exp++
	}
	if neg {
		out = append(out, '-')
	}
	for k := lead; k < end; k++ {
		out = append(out, at(k))
	}
	if exp != 0 {
		out = append(out, 'e')
		out = strconv.AppendInt(out, exp, 10)
	}
	return out, nil
}

// lookupJSON returns the string value (decoded) or the number (as written) at path in the
// JSON document b, if there is one.
func lookupJSON(b []byte, path []string) (string, bool) {
	d := jsonDecoder{b: b}
	var scratch []byte
	for depth, name := range path {
		d.ws()
		if d.i >= len(d.b) || d.b[d.i] != '{' {
			return "", false
		}
		d.i++
		found := false
		for !found {
			d.ws()
			if d.i >= len(d.b) || d.b[d.i] != '"' {
				return "", false
			}
			var err error
			scratch, err = d.str(scratch[:0])
			if err != nil {
				return "", false
			}
			d.ws()
			if d.i >= len(d.b) || d.b[d.i] != ':' {
				return "", false
			}
			d.i++
			d.ws()
			if string(scratch[1:len(scratch)-1]) == name && !bytes.ContainsRune(scratch, '\\') {
				found = true
				break
			}
			if scratch, err = d.value(scratch[:0], nil, depth+1); err != nil {
				return "", false
			}
			d.ws()
			if d.i >= len(d.b) || d.b[d.i] != ',' {
				return "", false
			}
			d.i++
		}
	}
	d.ws()
	if d.i >= len(d.b) {
		return "", false
	}
	switch c := d.b[d.i]; {
	case c == '"':
		s, err := d.str(nil)
		if err != nil || bytes.IndexByte(s, '\\') >= 0 {
			// A key with characters that need escaping is not a valid key anyway.
			return "", false
		}
		return string(s[1 : len(s)-1]), true
	case c == '-' || ('0' <= c && c <= '9'):
		start := d.i
		if _, err := d.number(nil); err != nil {
			return "", false
		}
		return string(d.b[start:d.i]), true
	}
	return "", false
}
