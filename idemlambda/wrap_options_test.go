package idemlambda_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
)

// TestWrapOptionErrorsSayWhy: a refused KeyPath's error says why: the parser's reason, for
// a malformed one and for none.
func TestWrapOptionErrorsSayWhy(t *testing.T) {
	t.Parallel()
	eng := newEngine(t, idem.Options{})
	h := func(context.Context, string) (string, error) { return "", nil }
	for path, why := range map[string]string{"": "empty segment", "a..b": "empty segment", "a.": "empty segment"} {
		_, err := idemlambda.Wrap(idemlambda.Options{Runner: eng, KeyPath: path}, h)
		if !errors.Is(err, idem.ErrInvalidInput) || !strings.Contains(err.Error(), why) {
			t.Errorf("KeyPath %q: %v, want ErrInvalidInput saying %q", path, err, why)
		}
	}
}
