package idemlambda

import (
	"testing"
)

// FuzzKeyPath feeds arbitrary events and paths to the key lookup: it must never panic, and the
// same event must always give the same key.
func FuzzKeyPath(f *testing.F) {
	f.Add([]byte(`{"body":"{\"order_id\":\"o-1\"}"}`), "body.order_id")
	f.Add([]byte(`{"Records":[{"messageId":"m-1","body":"{\"a\":[1,2,{\"b\":null}]}"}]}`), "Records.0.body.a.2.b")
	f.Add([]byte(`[1,"2",{"3":4}]`), "2.3")
	f.Add([]byte(`{"a":1e400,"b":-0,"c":"\u0000"}`), ".")
	f.Add([]byte(`"\"\\\"nested\\\"\""`), "x")
	f.Fuzz(func(t *testing.T, event []byte, path string) {
		segs, err := parsePath(path)
		if err != nil || path == "" {
			return
		}
		doc, err := decode(event)
		if err != nil {
			return
		}
		v1, ok1 := lookup(doc, segs)
		doc2, _ := decode(event)
		v2, ok2 := lookup(doc2, segs)
		if ok1 != ok2 {
			t.Fatalf("lookup is not deterministic: %v then %v", ok1, ok2)
		}
		if !ok1 {
			return
		}
		if empty(v1) != empty(v2) {
			t.Fatalf("emptiness is not deterministic")
		}
		if k1, k2 := encodeKey(v1), encodeKey(v2); k1 != k2 {
			t.Fatalf("key is not deterministic: %q, then %q", k1, k2)
		}
	})
}
