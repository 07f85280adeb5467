package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"hash/fnv"
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
	UpdateTable(ctx context.Context, in *dynamodb.UpdateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error)
}

// TableOptions tune CreateTable. The zero value creates an on-demand table.
type TableOptions struct {
	// ReadCapacity and WriteCapacity, when both are set, create a provisioned table with these
	// capacity units. Default 0: on-demand (PAY_PER_REQUEST) billing.
	ReadCapacity, WriteCapacity int64
	// Wait bounds how long CreateTable waits for a new table to become ACTIVE, and then for
	// the listing index it adds to an existing table to be built (which takes longer the
	// more items the table holds). Default 2m.
	Wait time.Duration
}

// CreateTable creates the table described by the store's options (partition key and optional
// sort key, both String) with its listing index (ListIndex) if it does not exist, waits until
// it is ACTIVE, and enables DynamoDB TTL on Options.TTLAttribute if it is not enabled yet. It
// is idempotent: on an existing table it adds the listing index if the table lacks it
// (UpdateTable; DynamoDB builds it in the background, and CreateTable waits until it is
// ACTIVE) and checks TTL. The client must implement TableAPI (a *dynamodb.Client does);
// otherwise it returns an error wrapping idem.ErrInvalidInput.
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
		KeySchema:              []types.KeySchemaElement{{AttributeName: &s.opt.PartitionKey, KeyType: types.KeyTypeHash}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{s.listIndex(opt)},
	}
	in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(attrListShard), AttributeType: types.ScalarAttributeTypeN})
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
	if err := s.ensureListIndex(ctx, api, opt); err != nil {
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

// ListIndex is the name of the table's listing index, a global secondary index that List
// queries: partition key list_shard (Number, one of ListShards groups, a hash of the key),
// sort key the table's partition key, projecting keys only. Only record items carry
// list_shard, so the index holds records and no response parts.
const ListIndex = "idem_list"

// ListShards is how many partitions of the listing index records are spread over, so that
// the index's writes (one per new record and per deleted one) are not all on one partition
// key. A page of List merges one Query per shard. It is part of the item layout.
const ListShards = 16

// listShard returns the listing index partition of key.
func listShard(key string) int64 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int64(h.Sum32() % ListShards)
}

// listIndex describes the listing index for CreateTable and UpdateTable.
func (s *Store) listIndex(opt TableOptions) types.GlobalSecondaryIndex {
	gsi := types.GlobalSecondaryIndex{
		IndexName: aws.String(ListIndex),
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrListShard), KeyType: types.KeyTypeHash},
			{AttributeName: &s.opt.PartitionKey, KeyType: types.KeyTypeRange},
		},
		Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly},
	}
	if opt.ReadCapacity > 0 {
		gsi.ProvisionedThroughput = &types.ProvisionedThroughput{ReadCapacityUnits: &opt.ReadCapacity, WriteCapacityUnits: &opt.WriteCapacity}
	}
	return gsi
}

// ensureListIndex adds the listing index to a table that lacks it (a table created by a
// version of the store without it, or by other tools) and waits until it is ACTIVE. Records
// written before it existed carry no list_shard: they are listed once a claim or a Complete
// rewrites them, and otherwise age out by their TTL.
func (s *Store) ensureListIndex(ctx context.Context, api TableAPI, opt TableOptions) error {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(opt.Wait, 2*time.Minute))
	defer cancel()
	for {
		out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &s.opt.Table})
		if err != nil {
			return err
		}
		var idx *types.GlobalSecondaryIndexDescription
		for i, g := range out.Table.GlobalSecondaryIndexes {
			if aws.ToString(g.IndexName) == ListIndex {
				idx = &out.Table.GlobalSecondaryIndexes[i]
			}
		}
		switch {
		case idx == nil:
			gsi := s.listIndex(opt)
			if gsi.ProvisionedThroughput == nil && out.Table.BillingModeSummary != nil &&
				out.Table.BillingModeSummary.BillingMode != types.BillingModePayPerRequest {
				// A provisioned table: the index gets the table's capacity.
				if pt := out.Table.ProvisionedThroughput; pt != nil {
					gsi.ProvisionedThroughput = &types.ProvisionedThroughput{ReadCapacityUnits: pt.ReadCapacityUnits, WriteCapacityUnits: pt.WriteCapacityUnits}
				}
			}
			_, err := api.UpdateTable(ctx, &dynamodb.UpdateTableInput{
				TableName: &s.opt.Table,
				AttributeDefinitions: []types.AttributeDefinition{
					{AttributeName: aws.String(attrListShard), AttributeType: types.ScalarAttributeTypeN},
					{AttributeName: &s.opt.PartitionKey, AttributeType: types.ScalarAttributeTypeS},
				},
				GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: &types.CreateGlobalSecondaryIndexAction{
					IndexName: gsi.IndexName, KeySchema: gsi.KeySchema, Projection: gsi.Projection, ProvisionedThroughput: gsi.ProvisionedThroughput,
				}}},
			})
			var inUse *types.ResourceInUseException
			if err != nil && !errors.As(err, &inUse) { // in use: another process is adding it
				return err
			}
		case idx.IndexStatus == types.IndexStatusActive:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
