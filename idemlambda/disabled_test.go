package idemlambda_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemlambda"
)

// IDEMLAMBDA_DISABLED outside Lambda: no engine needed, every event runs, keys are still
// checked, and each wrapper warns; a value that is not a boolean is refused.
func TestDisabledLocally(t *testing.T) {
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "")
	t.Setenv(idemlambda.DisabledEnv, "1")
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	runs := 0
	h, err := idemlambda.Wrap(idemlambda.Options{KeyPath: "id", RequireKey: true, Logger: logger},
		func(context.Context, map[string]any) (int, error) { runs++; return runs, nil })
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := h(context.Background(), map[string]any{"id": "o-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h(context.Background(), map[string]any{"id": ""}); !errors.Is(err, idemlambda.ErrMissingKey) {
		t.Fatalf("no key while disabled: %v", err)
	}
	if runs != 2 {
		t.Fatalf("ran %d times, want 2", runs)
	}
	px, err := idemlambda.WrapHTTPAPI(idemlambda.ProxyOptions{Logger: logger, Unscoped: true},
		func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			runs++
			return events.APIGatewayV2HTTPResponse{StatusCode: 201}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r, err := px(context.Background(), v2Request("t1", "k-1", `{}`)); err != nil || r.StatusCode != 201 {
			t.Fatalf("proxy: %+v %v", r, err)
		}
	}
	if r, _ := px(context.Background(), v2Request("t1", "", `{}`)); runs != 5 || r.StatusCode != 201 {
		t.Fatalf("proxy: ran %d times, want 5", runs)
	}
	if n := strings.Count(log.String(), "idempotency is OFF"); n != 2 {
		t.Fatalf("%d warnings, want one per wrapper:\n%s", n, log.String())
	}
	t.Setenv(idemlambda.DisabledEnv, "yes please")
	if _, err := idemlambda.Wrap(idemlambda.Options{KeyPath: "id"}, func(context.Context, string) (string, error) { return "", nil }); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("a value that is not a boolean: %v", err)
	}
	t.Setenv(idemlambda.DisabledEnv, "0")
	if _, err := idemlambda.Wrap(idemlambda.Options{KeyPath: "id"}, func(context.Context, string) (string, error) { return "", nil }); !errors.Is(err, idem.ErrInvalidInput) {
		t.Fatalf("not disabled, no engine: %v", err)
	}
}
