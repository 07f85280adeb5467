package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TableAPI is the part of the DynamoDB client CreateTable uses. *dynamodb.Client implements it.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// TableOptions tune CreateTable. The zero value creates an on-demand table.
type TableOptions struct {
	// ReadCapacity and WriteCapacity, when both are set, create a provisioned table with these
	// capacity units. Default 0: on-demand (PAY_PER_REQUEST) billing.
	ReadCapacity, WriteCapacity int64
	// Wait bounds how long CreateTable waits for a new table to become ACTIVE. Default 2m.
	Wait time.Duration
}

// CreateTable creates the table described by the store's options (partition key and optional
// sort key, both String) if it does not exist, waits until it is ACTIVE, and enables DynamoDB
// TTL on Options.TTLAttribute if it is not enabled yet. It is idempotent: on an existing table
// it only checks TTL. The client must implement TableAPI (a *dynamodb.Client does); otherwise
// it returns an error wrapping idem.ErrInvalidInput.
//
// DynamoDB allows only one TTL attribute per table: on a shared table whose TTL is already
// enabled on another attribute, CreateTable returns an error and changes nothing.
func (s *Store) CreateTable(ctx context.Context, opt TableOptions) error {
	api, ok := s.api.(TableAPI)
	if !ok {
		return invalid("Options.Client does not implement TableAPI (CreateTable, DescribeTable, DescribeTimeToLive, UpdateTimeToLive)")
	}
	if (opt.ReadCapacity > 0) != (opt.WriteCapacity > 0) || opt.ReadCapacity < 0 || opt.WriteCapacity < 0 {
		return invalid("TableOptions.ReadCapacity and TableOptions.WriteCapacity must both be positive or both zero")
	}
	in := &dynamodb.CreateTableInput{
		TableName: &s.opt.Table,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: &s.opt.PartitionKey, AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{{AttributeName: &s.opt.PartitionKey, KeyType: types.KeyTypeHash}},
	}
	if s.opt.SortKey != "" {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: &s.opt.SortKey, AttributeType: types.ScalarAttributeTypeS})
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: &s.opt.SortKey, KeyType: types.KeyTypeRange})
	}
	if opt.ReadCapacity > 0 {
		in.BillingMode = types.BillingModeProvisioned
		in.ProvisionedThroughput = &types.ProvisionedThroughput{ReadCapacityUnits: &opt.ReadCapacity, WriteCapacityUnits: &opt.WriteCapacity}
	} else {
		in.BillingMode = types.BillingModePayPerRequest
	}
	_, err := api.CreateTable(ctx, in)
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return wrap("create table", err)
	}
	w := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 100 * time.Millisecond
		o.MaxDelay = 2 * time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: &s.opt.Table}, cmp.Or(opt.Wait, 2*time.Minute)); err != nil {
		return wrap("create table", err)
	}
	ttl, err := api.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &s.opt.Table})
	if err != nil {
		return wrap("create table", err)
	}
	if d := ttl.TimeToLiveDescription; d != nil && (d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		if aws.ToString(d.AttributeName) != s.opt.TTLAttribute {
			return invalid("table %s has TTL on attribute %q, not Options.TTLAttribute %q", s.opt.Table, aws.ToString(d.AttributeName), s.opt.TTLAttribute)
		}
		return nil
	}
	_, err = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &s.opt.Table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: &s.opt.TTLAttribute, Enabled: aws.Bool(true)},
	})
	return wrap("create table", err)
}
