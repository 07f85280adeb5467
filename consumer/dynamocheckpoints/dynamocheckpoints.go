// Package dynamocheckpoints keeps the checkpoints and leases of stream consumers
// (consumer/kinesis, consumer/dynamostream) in a DynamoDB table, so that a restarted worker
// reads on from where the last one stopped, and the workers of one application, in any number
// of processes, share the stream's shards.
//
//	cps, err := dynamocheckpoints.New(dynamocheckpoints.Options{Client: db, Table: "idem_checkpoints", Application: "billing"})
//	…
//	w, err := kinesis.Start(ctx, c, kinesis.Options{Client: client, Stream: "payments", Checkpoints: cps})
//
// The table has a String partition key "app" and a String sort key "shard" (CreateTable makes
// it); each application has one item per shard it has read: its checkpoint, and the worker
// holding its lease until when. Every change is a conditional write, so two workers never
// hold one shard's lease at once, and a checkpoint never moves back.
//
// With checkpoints kept only in memory, a restarted worker reads every shard again from
// Options.Start: from TRIM_HORIZON, all the records the stream keeps (24 hours by default on
// Kinesis), each a duplicate while the idem store keeps its key and a second effect once the
// key has expired; from LATEST, none of the records put while it was down. Durable checkpoints
// avoid both.
package dynamocheckpoints

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/consumer/internal/shards"
)

// API is the part of the DynamoDB client the checkpoints use. *dynamodb.Client implements it.
type API interface {
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// Options configure Checkpoints. All fields are required.
type Options struct {
	// Client is the DynamoDB client, usually a *dynamodb.Client.
	Client API
	// Table is the table's name: partition key "app" and sort key "shard", both Strings.
	Table string
	// Application names the consumer application: its workers share one Application, and two
	// applications that each handle every record (billing and shipping) have one each, in one
	// table or two.
	Application string
}

// Checkpoints keep an application's checkpoints and shard leases in a DynamoDB table. They
// implement the Checkpoints of consumer/kinesis and consumer/dynamostream. Create them with
// New; they are safe for concurrent use.
type Checkpoints struct{ opt Options }

var _ shards.Checkpoints = (*Checkpoints)(nil)

// New returns the checkpoints of opt.Application in opt.Table. It fails with an
// *idem.OptionError (matching idem.ErrInvalidInput) when a field is missing. It does not
// create the table: see CreateTable.
func New(opt Options) (*Checkpoints, error) {
	bad := func(field string) error {
		return &idem.OptionError{Package: "dynamocheckpoints", Field: "Options." + field, Problem: "is required"}
	}
	switch {
	case opt.Client == nil:
		return nil, bad("Client")
	case opt.Table == "":
		return nil, bad("Table")
	case opt.Application == "":
		return nil, bad("Application")
	}
	return &Checkpoints{opt: opt}, nil
}

// Attribute names.
const (
	attrApp        = "app"
	attrShard      = "shard"
	attrCheckpoint = "checkpoint"
	attrOrder      = "checkpoint_order" // the checkpoint in a form that sorts as Later does
	attrOwner      = "lease_owner"
	attrUntil      = "lease_until" // Unix milliseconds
)

// CreateTable creates the table (on-demand capacity) unless it exists, and waits until it is
// active.
func (c *Checkpoints) CreateTable(ctx context.Context) error {
	_, err := c.opt.Client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(c.opt.Table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrApp), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrShard), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrApp), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrShard), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamocheckpoints: creating table %s: %w", c.opt.Table, err)
	}
	w := dynamodb.NewTableExistsWaiter(c.opt.Client)
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(c.opt.Table)}, 2*time.Minute); err != nil {
		return fmt.Errorf("dynamocheckpoints: waiting for table %s: %w", c.opt.Table, err)
	}
	return nil
}

func (c *Checkpoints) key(shard string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		attrApp:   &types.AttributeValueMemberS{Value: c.opt.Application},
		attrShard: &types.AttributeValueMemberS{Value: shard},
	}
}

func str(s string) types.AttributeValue { return &types.AttributeValueMemberS{Value: s} }

func millis(t time.Time) types.AttributeValue {
	var ms int64
	if !t.IsZero() {
		ms = t.UnixMilli()
	}
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(ms, 10)}
}

var names = map[string]string{"#owner": attrOwner, "#until": attrUntil}

func failedCondition(err error) bool {
	var ccf *types.ConditionalCheckFailedException
	return errors.As(err, &ccf)
}

// Claim implements the Checkpoints interface: one conditional UpdateItem.
func (c *Checkpoints) Claim(ctx context.Context, shard, owner string, until time.Time) (string, bool, error) {
	out, err := c.opt.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(c.opt.Table),
		Key:                       c.key(shard),
		UpdateExpression:          aws.String("SET #owner = :owner, #until = :until"),
		ConditionExpression:       aws.String("attribute_not_exists(#owner) OR #owner = :owner OR #until <= :now"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: map[string]types.AttributeValue{":owner": str(owner), ":until": millis(until), ":now": millis(time.Now())},
		ReturnValues:              types.ReturnValueAllNew,
	})
	switch {
	case failedCondition(err):
		cp, err := c.Checkpoint(ctx, shard)
		return cp, false, err
	case err != nil:
		return "", false, fmt.Errorf("dynamocheckpoints: claiming shard %s: %w", shard, err)
	}
	return text(out.Attributes[attrCheckpoint]), true, nil
}

// Take implements the Checkpoints interface: one UpdateItem on the condition that from holds
// the lease.
func (c *Checkpoints) Take(ctx context.Context, shard, from, owner string, until time.Time) (string, bool, error) {
	out, err := c.opt.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(c.opt.Table),
		Key:                       c.key(shard),
		UpdateExpression:          aws.String("SET #owner = :owner, #until = :until"),
		ConditionExpression:       aws.String("#owner = :from"),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: map[string]types.AttributeValue{":owner": str(owner), ":until": millis(until), ":from": str(from)},
		ReturnValues:              types.ReturnValueAllNew,
	})
	switch {
	case failedCondition(err):
		cp, err := c.Checkpoint(ctx, shard)
		return cp, false, err
	case err != nil:
		return "", false, fmt.Errorf("dynamocheckpoints: taking shard %s: %w", shard, err)
	}
	return text(out.Attributes[attrCheckpoint]), true, nil
}

// Save implements the Checkpoints interface: one UpdateItem on the condition that owner holds
// the lease and the checkpoint moves forward; when the condition fails, a read tells which.
func (c *Checkpoints) Save(ctx context.Context, shard, owner, checkpoint string) (bool, error) {
	_, err := c.opt.Client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(c.opt.Table),
		Key:                       c.key(shard),
		UpdateExpression:          aws.String("SET #cp = :cp, #order = :order"),
		ConditionExpression:       aws.String("#owner = :owner AND (attribute_not_exists(#order) OR #order < :order)"),
		ExpressionAttributeNames:  map[string]string{"#owner": attrOwner, "#cp": attrCheckpoint, "#order": attrOrder},
		ExpressionAttributeValues: map[string]types.AttributeValue{":owner": str(owner), ":cp": str(checkpoint), ":order": str(shards.Order(checkpoint))},
	})
	switch {
	case failedCondition(err):
		l, err := c.get(ctx, shard)
		return err == nil && l.Owner == owner, err
	case err != nil:
		return false, fmt.Errorf("dynamocheckpoints: saving shard %s's checkpoint: %w", shard, err)
	}
	return true, nil
}

// Checkpoint implements the Checkpoints interface (a strongly consistent read).
func (c *Checkpoints) Checkpoint(ctx context.Context, shard string) (string, error) {
	l, err := c.get(ctx, shard)
	return l.Checkpoint, err
}

func (c *Checkpoints) get(ctx context.Context, shard string) (shards.Lease, error) {
	out, err := c.opt.Client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(c.opt.Table), Key: c.key(shard), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return shards.Lease{}, fmt.Errorf("dynamocheckpoints: reading shard %s: %w", shard, err)
	}
	return lease(out.Item), nil
}

// Leases implements the Checkpoints interface: a strongly consistent Query of the
// application's items.
func (c *Checkpoints) Leases(ctx context.Context) ([]shards.Lease, error) {
	var out []shards.Lease
	in := &dynamodb.QueryInput{
		TableName:                 aws.String(c.opt.Table),
		KeyConditionExpression:    aws.String("#app = :app"),
		ExpressionAttributeNames:  map[string]string{"#app": attrApp},
		ExpressionAttributeValues: map[string]types.AttributeValue{":app": str(c.opt.Application)},
		ConsistentRead:            aws.Bool(true),
	}
	for {
		resp, err := c.opt.Client.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("dynamocheckpoints: listing leases: %w", err)
		}
		for _, item := range resp.Items {
			out = append(out, lease(item))
		}
		if len(resp.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = resp.LastEvaluatedKey
	}
}

func lease(item map[string]types.AttributeValue) shards.Lease {
	l := shards.Lease{Shard: text(item[attrShard]), Checkpoint: text(item[attrCheckpoint]), Owner: text(item[attrOwner])}
	if n, ok := item[attrUntil].(*types.AttributeValueMemberN); ok {
		if ms, err := strconv.ParseInt(n.Value, 10, 64); err == nil && ms > 0 {
			l.Until = time.UnixMilli(ms)
		}
	}
	return l
}

func text(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}
