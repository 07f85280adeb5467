package outbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/outbox"
)

func TestKeyOf(t *testing.T) {
	for _, name := range []string{"Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY"} {
		if k, err := outbox.KeyOf(map[string][]string{name: {"payment-1/captured"}}); err != nil || k != "payment-1/captured" {
			t.Errorf("%s: %q %v", name, k, err)
		}
	}
	for _, h := range []map[string][]string{nil, {"Idempotency-Key": {""}}, {"Idempotency_Key": {"k"}}} {
		if _, err := outbox.KeyOf(h); !errors.Is(err, idem.ErrInvalidInput) {
			t.Errorf("%v: %v, want ErrInvalidInput", h, err)
		}
	}
}

func TestWithKeyReplacesAnyCase(t *testing.T) {
	h := outbox.WithKey(map[string][]string{"idempotency-key": {"forged"}, "X-Trace": {"t"}}, "real")
	if len(h) != 2 || h["Idempotency-Key"][0] != "real" || h["X-Trace"][0] != "t" {
		t.Fatalf("%v", h)
	}
}

func TestMessageCheck(t *testing.T) {
	for _, m := range []outbox.Message{{Topic: "t"}, {Key: "k"}, {Key: strings.Repeat("k", idem.MaxStorageKeyLen+1), Topic: "t"}, {Key: "k", OrderKey: strings.Repeat("o", idem.MaxStorageKeyLen+1), Topic: "t"},
		{Key: "a\nb", Topic: "t"}, {Key: "a\rb", Topic: "t"}, {Key: "a\x00b", Topic: "t"}, {Key: "a\x7fb", Topic: "t"}, {Key: "\xff", Topic: "t"}} {
		if err := m.Check(); !errors.Is(err, idem.ErrInvalidInput) || !strings.HasPrefix(err.Error(), "outbox: ") {
			t.Errorf("key %q, topic %q: %v", m.Key, m.Topic, err)
		}
	}
	for _, m := range []outbox.Message{{Key: "k", Topic: "t"}, {Key: "kunde 7/zahlung ü ✓", Topic: "t"}, {Key: "k", OrderKey: strings.Repeat("o", idem.MaxStorageKeyLen), Topic: "t"}} {
		if err := m.Check(); err != nil {
			t.Fatal(err)
		}
	}
}
