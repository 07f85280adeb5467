package idemhttp

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzJSONKey feeds request bodies to a JSON key source (the webhook receivers' key: a
// sender's event id in the body). Whatever the body, it must not panic, and it either finds no
// key, refuses the request with ErrInvalidKey, or returns a valid key. A body built by
// encoding/json with a valid key at the path must give that key back.
func FuzzJSONKey(f *testing.F) {
	f.Add("id", []byte(`{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","type":"charge.succeeded"}`), "evt_1")
	f.Add("data.object.id", []byte(`{"data":{"object":{"id":"ch_3"}},"id":"evt_2"}`), "ch_3")
	f.Add("id", []byte(`{"id":12345678901234567890}`), "12345678901234567890")
	f.Add("id", []byte(`{"id":"a\"b"}`), "x")
	f.Add("id", []byte(`{"other":[1,2,{"id":"no"}],"id":"yes"}`), "yes")
	f.Add("a.b", []byte(`{"a":"not an object"}`), "k")
	f.Add("id", []byte(`[{"id":"array at the top"}]`), "k")
	f.Add("id", []byte("{\"id\":\"\x01\"}"), "k")
	f.Add("id", []byte(`{"id":`), "k")
	f.Fuzz(func(t *testing.T, path string, body []byte, key string) {
		src := JSONKey(path)
		if src.validate() != nil {
			return
		}
		got, err := src.fromBody(nil, body)
		switch {
		case err != nil && !errors.Is(err, ErrInvalidKey):
			t.Fatalf("error %v does not match ErrInvalidKey", err)
		case err == nil && got != "" && !ValidKey(got):
			t.Fatalf("invalid key %q accepted", got)
		}
		// Round trip: the key at the path of a document encoding/json wrote.
		if !ValidKey(key) || strings.ContainsAny(key, `"\<>&`) {
			return
		}
		segs := strings.Split(path, ".")
		var doc any = key
		for i := len(segs) - 1; i >= 0; i-- {
			if strings.ContainsAny(segs[i], "\"\\") || !ValidKey(segs[i]) || strings.ContainsAny(segs[i], "<>&") || segs[i] == "~other" {
				return
			}
			doc = map[string]any{segs[i]: doc, "~other": []any{1, "x", nil}}
		}
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := src.fromBody(nil, b); err != nil || got != key {
			t.Fatalf("path %q in %s: got %q, %v; want %q", path, b, got, err, key)
		}
	})
}
