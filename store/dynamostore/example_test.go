package dynamostore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/dynamostore"
)

// A store on AWS: the client comes from the usual configuration chain; the table is created
// once (or by your infrastructure code) with TTL enabled.
func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	st, err := dynamostore.New(dynamostore.Options{Client: dynamodb.NewFromConfig(cfg), Table: "idem"})
	if err != nil {
		log.Fatal(err)
	}
	if err := st.CreateTable(ctx, dynamostore.TableOptions{}); err != nil {
		log.Fatal(err)
	}
	eng, err := idem.New(st, idem.Options{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := eng.Do(ctx, "payment:order-42", idem.Fingerprint([]byte("charge 10 EUR")), func(ctx context.Context) (idem.Response, error) {
		return idem.Response{Body: []byte("charged")}, nil // the effect, at most once
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (replayed: %v)\n", res.Response.Body, res.Replayed)
}

// Sharing a single-table design: idem's items live beside the application's under a key prefix
// and a fixed sort key value; DynamoDB Local stands in for AWS.
func ExampleOptions_singleTable() {
	client := dynamostore.LocalClient("http://127.0.0.1:8000", nil)
	st, err := dynamostore.New(dynamostore.Options{
		Client:       client,
		Table:        "app",
		PartitionKey: "PK",
		SortKey:      "SK",
		SortKeyValue: "IDEM",
		KeyPrefix:    "IDEM#",
		TTLAttribute: "expires",
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = st
}
