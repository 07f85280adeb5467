package dynamocheckpoints_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer/dynamocheckpoints"
	"github.com/idemkit/idem/consumer/internal/shards"
	"github.com/idemkit/idem/consumer/internal/shards/shardstest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
)

// table creates a checkpoint table on DynamoDB Local and drops it after the test.
func table(t *testing.T) (*dynamodb.Client, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test (DynamoDB Local); skipped with -short")
	}
	ep := testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
	db := dynamostore.LocalClient(ep, nil)
	name := "idem_checkpoints_" + randHex(6)
	cps, err := dynamocheckpoints.New(dynamocheckpoints.Options{Client: db, Table: name, Application: "app"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cps.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cps.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable on an existing table: %v", err)
	}
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return db, name
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// The checkpoint conformance suite on DynamoDB Local, each case an application of its own in
// one table.
func TestConformance(t *testing.T) {
	db, name := table(t)
	shardstest.Run(t, func(t *testing.T) shards.Checkpoints {
		cps, err := dynamocheckpoints.New(dynamocheckpoints.Options{Client: db, Table: name, Application: "app-" + randHex(4)})
		if err != nil {
			t.Fatal(err)
		}
		return cps
	})
}

// Two applications in one table keep their checkpoints and leases apart.
func TestApplicationsApart(t *testing.T) {
	db, name := table(t)
	ctx := context.Background()
	billing, _ := dynamocheckpoints.New(dynamocheckpoints.Options{Client: db, Table: name, Application: "billing"})
	shipping, _ := dynamocheckpoints.New(dynamocheckpoints.Options{Client: db, Table: name, Application: "shipping"})
	until := time.Now().Add(time.Hour)
	if _, held, err := billing.Claim(ctx, "s", "a", until); err != nil || !held {
		t.Fatal(held, err)
	}
	if _, held, err := shipping.Claim(ctx, "s", "b", until); err != nil || !held {
		t.Fatalf("shipping could not claim the shard billing reads: %v %v", held, err)
	}
	billing.Save(ctx, "s", "a", "42")
	if cp, _ := shipping.Checkpoint(ctx, "s"); cp != "" {
		t.Fatalf("shipping sees billing's checkpoint %q", cp)
	}
	if ls, _ := shipping.Leases(ctx); len(ls) != 1 || ls[0].Owner != "b" {
		t.Fatalf("shipping's leases: %+v", ls)
	}
}

// Every field is required; a missing one is an *idem.OptionError naming it.
func TestOptions(t *testing.T) {
	for field, opt := range map[string]dynamocheckpoints.Options{
		"Options.Client":      {Table: "t", Application: "a"},
		"Options.Table":       {Client: &dynamodb.Client{}, Application: "a"},
		"Options.Application": {Client: &dynamodb.Client{}, Table: "t"},
	} {
		_, err := dynamocheckpoints.New(opt)
		var oe *idem.OptionError
		if !errors.Is(err, idem.ErrInvalidInput) || !errors.As(err, &oe) || oe.Field != field || oe.Package != "dynamocheckpoints" {
			t.Errorf("missing %s: %v", field, err)
		}
	}
}
