package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/store/sqlitestore"
)

// inspect and list find a record scoped by idemgrpc's KeyedMetadataScope with
// --scope-face grpc; without it they say the record is not there.
func TestScopeFaceGRPC(t *testing.T) {
	t.Parallel()
	secret := "grpc-scope-secret-0123456789"
	scope, err := idemgrpc.KeyedMetadataScope("x-api-key", []byte(secret))(
		metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "sk_grpc_1")))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "idem.db")
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	res, err := st.Reserve(ctx, idem.ReserveRequest{Key: idem.ScopedKey(scope, "order-7"), Fingerprint: idem.Fingerprint([]byte("x")), Now: now, Lease: time.Minute, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(ctx, res.Record.Key, res.Record.Token, idem.Response{Status: 200}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	st.Close()
	vars := map[string]string{"IDEM_STORE": "sqlite://" + path, "IDEM_SCOPE_SECRET": secret}
	code, out, errs := runEnv(t, vars, "inspect", "order-7", "--scope-value", "sk_grpc_1", "--scope-face", "grpc")
	if code != 0 || !strings.Contains(out, "completed") || !strings.Contains(out, "attempts     1") {
		t.Errorf("inspect --scope-face grpc: %d %q %q", code, out, errs)
	}
	code, out, _ = runEnv(t, vars, "list", "--scope-value", "sk_grpc_1", "--scope-face", "grpc")
	if code != 0 || !strings.Contains(out, "|order-7") {
		t.Errorf("list --scope-face grpc: %d %q", code, out)
	}
	if code, _, errs := runEnv(t, vars, "inspect", "order-7", "--scope-value", "sk_grpc_1"); code != 1 || !strings.Contains(errs, "no record") {
		t.Errorf("inspect with the HTTP scope of a gRPC record: %d %q, want not found", code, errs)
	}
	if code, _, errs := runEnv(t, vars, "inspect", "order-7", "--scope-value", "sk_grpc_1", "--scope-face", "kafka"); code != 2 || !strings.Contains(errs, "want http or grpc") {
		t.Errorf("--scope-face kafka: %d %q", code, errs)
	}
}
