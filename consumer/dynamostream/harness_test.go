package dynamostream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/store/dynamostore"
)

// bundle is a table with a stream on DynamoDB Local (IDEM_DYNAMODB_ENDPOINT, default
// http://127.0.0.1:8000), and clients of both APIs.
type bundle struct {
	db      *dynamodb.Client
	streams *dynamodbstreams.Client
	table   string
	arn     string
}

// setup creates a table (pk, sk) whose stream carries new images, and drops it after the test.
// It skips without DynamoDB Local, or fails under IDEM_REQUIRE_SERVICES=1.
func setup(t testing.TB) *bundle {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test (DynamoDB Local); skipped with -short")
	}
	ep := testenv.Service(t, "DynamoDB Local", "IDEM_DYNAMODB_ENDPOINT", "http://127.0.0.1:8000", testenv.HostPort("8000"))
	b := &bundle{db: dynamostore.LocalClient(ep, nil), table: "idem_stream_" + randHex(6)}
	b.streams = dynamodbstreams.New(dynamodbstreams.Options{Region: "us-east-1", BaseEndpoint: aws.String(ep),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}, nil
		})})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := b.db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(b.table),
		AttributeDefinitions: []ddbtypes.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: ddbtypes.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: ddbtypes.ScalarAttributeTypeS},
		},
		KeySchema: []ddbtypes.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: ddbtypes.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: ddbtypes.KeyTypeRange},
		},
		BillingMode:         ddbtypes.BillingModePayPerRequest,
		StreamSpecification: &ddbtypes.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: ddbtypes.StreamViewTypeNewImage},
	})
	if err != nil {
		t.Fatalf("CreateTable: %v", err)
	}
	b.arn = aws.ToString(out.TableDescription.LatestStreamArn)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = b.db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(b.table)})
	})
	return b
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
