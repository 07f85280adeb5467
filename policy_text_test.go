package idem_test

import (
	"errors"
	"testing"

	"github.com/idemkit/idem"
)

// TestUncertainPolicyText checks that every policy's word reads back as the policy, that the
// former word "pin" still reads as hold, and that anything else is refused.
func TestUncertainPolicyText(t *testing.T) {
	t.Parallel()
	for _, p := range []idem.UncertainPolicy{idem.UncertainExpire, idem.UncertainRelease, idem.UncertainHold} {
		b, err := p.MarshalText()
		if err != nil {
			t.Fatalf("%d: %v", p, err)
		}
		var back idem.UncertainPolicy
		if err := back.UnmarshalText(b); err != nil || back != p {
			t.Errorf("%q read back as %v, %v; want %v", b, back, err, p)
		}
	}
	var p idem.UncertainPolicy
	if err := p.UnmarshalText([]byte("pin")); err != nil || p != idem.UncertainHold {
		t.Errorf(`"pin" read as %v, %v; want hold`, p, err)
	}
	for _, bad := range []string{"", "Hold", "forever", "0"} {
		if err := p.UnmarshalText([]byte(bad)); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%q: err %v, want ErrInvalidInput", bad, err)
		}
	}
	if _, err := idem.UncertainPolicy(9).MarshalText(); !errors.Is(err, idem.ErrInvalidInput) {
		t.Errorf("unknown policy marshals: %v", err)
	}
}
