package storeurl_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
	"github.com/idemkit/idem/store/sqlmigrate"
	"github.com/idemkit/idem/store/storeurl"
)

// Migrate says what it did to a DynamoDB table: created it (0 to 2); added the newest-first
// index to a table that had only the listing index (1 to 2); nothing to a table that has both
// (up to date).
func TestMigrateDynamoDBSaysWhatItDid(t *testing.T) {
	t.Parallel()
	ep := testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := dynamostore.LocalClient(ep, http.DefaultTransport)
	old := fmt.Sprintf("storeurl_migrate_old_%d", time.Now().UnixNano())
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(old),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("list_shard"), AttributeType: types.ScalarAttributeTypeN},
		},
		KeySchema: []types.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String(dynamostore.ListIndex),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String("list_shard"), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String("pk"), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
		}},
		BillingMode: types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	fresh := fmt.Sprintf("storeurl_migrate_new_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		for _, table := range []string{old, fresh} {
			_, _ = client.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
		}
	})
	url := func(table string) string { return fmt.Sprintf("dynamodb://%s?endpoint=%s", table, ep) }
	for _, step := range []struct {
		table string
		want  sqlmigrate.Result
	}{
		{old, sqlmigrate.Result{From: 1, To: storeurl.DynamoDBVersion}},
		{old, sqlmigrate.Result{From: storeurl.DynamoDBVersion, To: storeurl.DynamoDBVersion}},
		{fresh, sqlmigrate.Result{From: 0, To: storeurl.DynamoDBVersion}},
		{fresh, sqlmigrate.Result{From: storeurl.DynamoDBVersion, To: storeurl.DynamoDBVersion}},
	} {
		got, err := storeurl.Migrate(ctx, url(step.table))
		if err != nil || got != step.want {
			t.Fatalf("Migrate %s: %+v %v, want %+v", step.table, got, err, step.want)
		}
	}
}
