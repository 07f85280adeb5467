package dynamocheckpoints_test

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemkit/idem/consumer/dynamocheckpoints"
	"github.com/idemkit/idem/consumer/kinesis"
)

// The checkpoints of the "ledger" application in the table "idem_checkpoints", created once,
// shared by every worker of the application.
func ExampleNew() {
	var db *dynamodb.Client // dynamodb.NewFromConfig(cfg)
	cps, err := dynamocheckpoints.New(dynamocheckpoints.Options{Client: db, Table: "idem_checkpoints", Application: "ledger"})
	if err != nil {
		panic(err)
	}
	if err := cps.CreateTable(context.Background()); err != nil { // once, or in your infrastructure code
		panic(err)
	}
	opt := kinesis.Options{Stream: "payments", Checkpoints: cps} // and Client: kinesis.Start(ctx, c, opt)
	_ = opt
}
