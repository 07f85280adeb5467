package idemfiber_test

import (
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemfiber"
	"github.com/idemkit/idem/idemhttp"
)

// TestOnEvent: Options.OnEvent gets one Event per request, with the outcome in the words
// idemhttp uses for the same thing, the status and the key.
func TestOnEvent(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		events []idemfiber.Event
	)
	b := setup(t, idem.Options{}, idemfiber.Options{Scope: idemfiber.SingleCaller(), OnEvent: func(ev idemfiber.Event) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}}, func(b *bundle) fiber.Handler {
		return func(c *fiber.Ctx) error {
			b.n.Add(1)
			if string(c.Body()) == "fail" {
				return c.SendStatus(fiber.StatusServiceUnavailable)
			}
			return c.Status(fiber.StatusCreated).SendString("ok")
		}
	})
	b.do("POST", "/v1/charges", "k1", "a")
	b.do("POST", "/v1/charges", "k1", "a")
	b.do("POST", "/v1/charges", "k1", "b")
	b.do("POST", "/v1/charges", "k2", "fail")
	b.do("GET", "/v1/charges", "", "")
	b.do("POST", "/v1/charges", "", "a")
	b.do("POST", "/v1/charges", strings.Repeat("k", 300), "a")
	want := []struct {
		outcome idemfiber.Outcome
		status  int
		key     string
	}{
		{idemfiber.OutcomeExecuted, 201, "k1"},
		{idemfiber.OutcomeReplay, 201, "k1"},
		{idemfiber.OutcomeMismatch, 422, "k1"},
		{idemfiber.OutcomeReleased, 503, "k2"},
		{idemfiber.OutcomeBypass, 201, ""},
		{idemfiber.OutcomeBypass, 201, ""},
		{idemfiber.OutcomeInvalidKey, 400, ""},
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(events), len(want), events)
	}
	for i, w := range want {
		if ev := events[i]; ev.Outcome != w.outcome || ev.Status != w.status || ev.Key != w.key || ev.Start.IsZero() || ev.Duration <= 0 {
			t.Errorf("request %d: %+v, want %s, %d, key %q", i, ev, w.outcome, w.status, w.key)
		}
	}
}

// TestOneHookShape: idemfiber follows the rule every face follows (checked for the others in
// idem's internal/optioncheck): one OnEvent func(Event) hook, whose Event has an Outcome.
func TestOneHookShape(t *testing.T) {
	f, ok := reflect.TypeFor[idemfiber.Options]().FieldByName("OnEvent")
	if !ok || f.Type != reflect.TypeFor[func(idemfiber.Event)]() {
		t.Fatalf("Options.OnEvent: %v, want func(Event)", f.Type)
	}
	o, ok := reflect.TypeFor[idemfiber.Event]().FieldByName("Outcome")
	if !ok || o.Type != reflect.TypeFor[idemfiber.Outcome]() {
		t.Errorf("Event.Outcome: %v, want Outcome", o.Type)
	}
	if idemfiber.OutcomeReplay != idemfiber.Outcome(idemhttp.OutcomeReplay) || idemfiber.OutcomeInFlight != idemfiber.Outcome(idemhttp.OutcomeInFlight) ||
		idemfiber.OutcomeExecuted != idemfiber.Outcome(idemhttp.OutcomeExecuted) || idemfiber.OutcomeStoreError != idemfiber.Outcome(idemhttp.OutcomeStoreError) {
		t.Error("idemfiber's outcomes say other words than idemhttp's for the same thing")
	}
}
