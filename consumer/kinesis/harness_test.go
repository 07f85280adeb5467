package kinesis_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awskinesis "github.com/aws/aws-sdk-go-v2/service/kinesis"
	"github.com/aws/aws-sdk-go-v2/service/kinesis/types"

	"github.com/idemkit/idem/internal/testenv"
)

// kinesisClient returns a client of IDEM_KINESIS_ENDPOINT (default http://127.0.0.1:4567, the
// kinesalite server that scripts/services.d/45-kinesalite.sh starts), or skips the test when it
// is not reachable (fails it under IDEM_REQUIRE_SERVICES=1).
func kinesisClient(t testing.TB) *awskinesis.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test (kinesalite); skipped with -short")
	}
	ep := testenv.Service(t, "Kinesis (kinesalite)", "IDEM_KINESIS_ENDPOINT", "http://127.0.0.1:4567", testenv.HostPort("4567"))
	return awskinesis.New(awskinesis.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(ep),
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}, nil
		}),
	})
}

// newStream creates a stream of its own with the given number of shards, waits until it is
// active and deletes it after the test.
func newStream(t testing.TB, client *awskinesis.Client, shards int32) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "idem-" + randHex(6)
	if _, err := client.CreateStream(ctx, &awskinesis.CreateStreamInput{StreamName: aws.String(name), ShardCount: aws.Int32(shards)}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	waitActive(t, client, name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = client.DeleteStream(ctx, &awskinesis.DeleteStreamInput{StreamName: aws.String(name)})
	})
	return name
}

func waitActive(t testing.TB, client *awskinesis.Client, name string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		d, err := client.DescribeStreamSummary(context.Background(), &awskinesis.DescribeStreamSummaryInput{StreamName: aws.String(name)})
		if err == nil && d.StreamDescriptionSummary.StreamStatus == types.StreamStatusActive {
			return
		}
	}
	t.Fatalf("stream %s did not become active", name)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
