package idemlambda_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
)

// TestKeyPathIndexPastTheEnd: an array index at or past the array's end finds no key (with
// RequireKey, ErrMissingKey), and the last element is found.
func TestKeyPathIndexPastTheEnd(t *testing.T) {
	t.Parallel()
	eng := newEngine(t, idem.Options{})
	for path, found := range map[string]bool{"items.0": true, "items.1": false, "items.2": false} {
		runs := 0
		h, err := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: path, RequireKey: true, Name: "idx"},
			func(context.Context, map[string]any) (string, error) { runs++; return "ok", nil })
		if err != nil {
			t.Fatal(err)
		}
		_, err = h(context.Background(), map[string]any{"items": []any{"only"}})
		if found && (err != nil || runs != 1) {
			t.Errorf("KeyPath %q: %v, ran %d; want the key found and the handler run", path, err, runs)
		}
		if !found && (!errors.Is(err, idemlambda.ErrMissingKey) || runs != 0) {
			t.Errorf("KeyPath %q: %v, ran %d; want ErrMissingKey", path, err, runs)
		}
	}
}
