package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem/store/internal/storeerr"
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
// sort key, both String) with its listing indexes (ListIndex and NewestIndex) if it does not
// exist, waits until it is ACTIVE, and enables DynamoDB TTL on Options.TTLAttribute if it is
// not enabled yet. It is idempotent: on an existing table it adds each listing index the table
// lacks (UpdateTable; DynamoDB builds it in the background, and CreateTable waits until it is
// ACTIVE) and checks TTL. When it adds NewestIndex to a table, it then gives the records
// already there their list_created (one Scan of the table, for the records that lack it, and
// a conditional UpdateItem each), so that they are listed newest first too. The client must implement TableAPI (a *dynamodb.Client does);
// otherwise it returns an error wrapping idem.ErrInvalidInput.
//
// DynamoDB allows only one TTL attribute per table: on a shared table whose TTL is already
// enabled on another attribute, CreateTable returns an error and changes nothing.
func (s *Store) CreateTable(ctx context.Context, opt TableOptions) error {
	api, ok := s.api.(TableAPI)
	if !ok {
		return storeerr.Option("dynamostore", "Options.Client", "does not implement TableAPI (CreateTable, DescribeTable, DescribeTimeToLive, UpdateTimeToLive)")
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
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{s.listIndex(opt), s.newestIndex(opt)},
	}
	in.AttributeDefinitions = append(in.AttributeDefinitions,
		types.AttributeDefinition{AttributeName: aws.String(attrListShard), AttributeType: types.ScalarAttributeTypeN},
		types.AttributeDefinition{AttributeName: aws.String(attrListCreated), AttributeType: types.ScalarAttributeTypeS})
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
	if _, err := s.ensureIndex(ctx, api, opt, s.listIndex(opt)); err != nil {
		return wrap("create table", err)
	}
	added, err := s.ensureIndex(ctx, api, opt, s.newestIndex(opt))
	if err != nil {
		return wrap("create table", err)
	}
	if added {
		if err := s.backfillNewest(ctx); err != nil {
			return wrap("create table", err)
		}
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

// NewestIndex is the name of the table's newest-first index, a global secondary index that
// List queries for idem.ListNewestFirst: partition key list_shard (the same ListShards groups
// as ListIndex), sort key list_created (String: the record's created_at in 16 zero-padded
// decimal digits of Unix microseconds, then its key), projecting keys only.
//
// Its partition key is not one constant but the ListShards groups, so that the index's writes
// (one per new record, per record claimed anew and per deleted one) spread over ListShards
// partition keys, as the table's writes spread over its keys, instead of all landing on one
// hot partition that would throttle, and through it the table's writes; the price is that a
// newest-first page merges ListShards Queries, as a key-order page does.
const NewestIndex = "idem_newest"

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

// listCreated returns the list_created attribute of the record of key created at created (Unix
// microseconds): 16 zero-padded decimal digits, then the key, cut at a rune boundary so that it
// stays within the 1024 bytes of an index sort key (a key longer than 1008 bytes sorts by its
// first 1008 among records of the same microsecond). With key "" it is the bound of a time.
func listCreated(created int64, key string) string {
	v := fmt.Sprintf("%016d", max(created, 0)) + key
	for len(v) > 1024 {
		_, n := utf8.DecodeLastRuneInString(v)
		v = v[:len(v)-n]
	}
	return v
}

// newestMember is how a newest-first merge orders a record: the 16 digits of its creation
// time, then its whole key.
func newestMember(created16, key string) string { return created16 + key }

// newestIndex describes the newest-first index for CreateTable and UpdateTable.
func (s *Store) newestIndex(opt TableOptions) types.GlobalSecondaryIndex {
	gsi := s.listIndex(opt)
	gsi.IndexName = aws.String(NewestIndex)
	gsi.KeySchema = []types.KeySchemaElement{
		{AttributeName: aws.String(attrListShard), KeyType: types.KeyTypeHash},
		{AttributeName: aws.String(attrListCreated), KeyType: types.KeyTypeRange},
	}
	return gsi
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

// ensureIndex adds the listing index gsi to a table that lacks it (a table created by a
// version of the store without it, or by other tools) and waits until it is ACTIVE; it reports
// whether this call added it. Records written before ListIndex existed carry no list_shard:
// they are listed once a claim or a Complete rewrites them, and otherwise age out by their
// TTL. Those written before NewestIndex existed get their list_created from CreateTable.
func (s *Store) ensureIndex(ctx context.Context, api TableAPI, opt TableOptions, gsi types.GlobalSecondaryIndex) (added bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(opt.Wait, 2*time.Minute))
	defer cancel()
	for {
		out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &s.opt.Table})
		if err != nil {
			return added, err
		}
		var idx *types.GlobalSecondaryIndexDescription
		for i, g := range out.Table.GlobalSecondaryIndexes {
			if aws.ToString(g.IndexName) == aws.ToString(gsi.IndexName) {
				idx = &out.Table.GlobalSecondaryIndexes[i]
			}
		}
		switch {
		case idx == nil:
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
					{AttributeName: aws.String(attrListCreated), AttributeType: types.ScalarAttributeTypeS},
					{AttributeName: &s.opt.PartitionKey, AttributeType: types.ScalarAttributeTypeS},
				},
				GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: &types.CreateGlobalSecondaryIndexAction{
					IndexName: gsi.IndexName, KeySchema: gsi.KeySchema, Projection: gsi.Projection, ProvisionedThroughput: gsi.ProvisionedThroughput,
				}}},
			})
			var inUse *types.ResourceInUseException
			switch {
			case err == nil:
				added = true
			case !errors.As(err, &inUse): // in use: another process is adding it
				return added, err
			}
		case idx.IndexStatus == types.IndexStatusActive:
			return added, nil
		}
		select {
		case <-ctx.Done():
			return added, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// backfillNewest gives every record of the store that has no list_created (written by a
// version of the store without NewestIndex) its list_created, from its created_at, and its
// list_shard if it has none (written before ListIndex): one Scan of the table for them, and an
// UpdateItem each, conditioned on the record still having that created_at and no
// list_created (a record claimed anew meanwhile has its own).
func (s *Store) backfillNewest(ctx context.Context) error {
	filter := "attribute_not_exists(#lcreated) AND attribute_exists(#created)"
	proj := "#pk, #created"
	names := []string{"#lcreated", "#created", "#pk"}
	if s.opt.SortKey != "" {
		proj += ", #sk"
		names = append(names, "#sk")
	}
	var from map[string]types.AttributeValue
	for {
		out, err := s.api.Scan(ctx, &dynamodb.ScanInput{
			TableName: &s.opt.Table, FilterExpression: &filter, ProjectionExpression: &proj,
			ExpressionAttributeNames: s.names(names...), ExclusiveStartKey: from, ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return err
		}
		for _, it := range out.Items {
			pk, _ := it[s.opt.PartitionKey].(*types.AttributeValueMemberS)
			crt, _ := it[attrCreatedAt].(*types.AttributeValueMemberN)
			if pk == nil || crt == nil || len(pk.Value) < len(s.opt.KeyPrefix) || pk.Value[:len(s.opt.KeyPrefix)] != s.opt.KeyPrefix {
				continue // another store's item
			}
			if s.opt.SortKey != "" {
				if sk, _ := it[s.opt.SortKey].(*types.AttributeValueMemberS); sk == nil || sk.Value != s.opt.SortKeyValue {
					continue
				}
			}
			created, err := strconv.ParseInt(crt.Value, 10, 64)
			if err != nil {
				continue // not a record's created_at: left as it is
			}
			key := pk.Value[len(s.opt.KeyPrefix):]
			_, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
				TableName:                 &s.opt.Table,
				Key:                       s.itemKey(key, 0),
				UpdateExpression:          aws.String("SET #lcreated = :lc, #shard = if_not_exists(#shard, :shard)"),
				ConditionExpression:       aws.String("#created = :c AND attribute_not_exists(#lcreated)"),
				ExpressionAttributeNames:  s.names("#lcreated", "#created", "#shard"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":lc": str(listCreated(created, key)), ":c": crt, ":shard": num(listShard(key))},
			})
			var ccf *types.ConditionalCheckFailedException
			if err != nil && !errors.As(err, &ccf) {
				return err
			}
		}
		if from = out.LastEvaluatedKey; from == nil {
			return nil
		}
	}
}
