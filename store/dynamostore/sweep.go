package dynamostore

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Sweep implements idem.Store: it deletes at most batch records that expired before now
// (expires_at <= now, released records included) and returns how many it deleted. Part items
// of large responses are deleted with their record and not counted.
//
// DynamoDB has no index on expires_at, so Sweep reads the table: each call continues a Scan
// (pages of SweepPageSize items, at most SweepMaxPages of them, filtered on expires_at and on
// KeyPrefix) where the previous call stopped, and deletes each candidate with a DeleteItem
// conditioned on expires_at <= now, so a record claimed again meanwhile is never deleted.
// Calls on one Store are serialised. A Scan is billed for every item it reads, matching or
// not, so in production let DynamoDB's TTL (see CreateTable) delete old records for free
// and use Sweep only where TTL is not available or not prompt enough.
func (s *Store) Sweep(ctx context.Context, now time.Time, batch int) (int, error) {
	if err := s.ready(ctx); err != nil || batch <= 0 {
		return 0, err
	}
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	nowM := num(micros(now))
	deleted, pages, reachedEnd := 0, 0, false
	for deleted < batch {
		if len(s.sweepTodo) == 0 {
			if reachedEnd || pages >= s.opt.SweepMaxPages {
				break
			}
			if err := s.scanPage(ctx, nowM); err != nil {
				return deleted, wrap("sweep", err)
			}
			pages++
			reachedEnd = s.sweepFrom == nil
			continue
		}
		it := s.sweepTodo[0]
		key := map[string]types.AttributeValue{s.opt.PartitionKey: it[s.opt.PartitionKey]}
		if s.opt.SortKey != "" {
			key[s.opt.SortKey] = it[s.opt.SortKey]
		}
		_, err := s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName:                 &s.opt.Table,
			Key:                       key,
			ConditionExpression:       aws.String("#exp <= :now"),
			ExpressionAttributeNames:  s.names("#exp"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": nowM},
		})
		var ccf *types.ConditionalCheckFailedException
		switch {
		case err == nil:
			if _, isPart := it[attrPart]; !isPart {
				deleted++
			}
		case errors.As(err, &ccf):
			// Claimed again or already gone: not ours to delete.
		default:
			return deleted, wrap("sweep", err) // the candidate stays queued for the next call
		}
		s.sweepTodo = s.sweepTodo[1:]
	}
	return deleted, nil
}

// scanPage reads one Scan page of expired items into sweepTodo and moves sweepFrom on (to nil
// at the end of the table, so the next page starts a new pass).
func (s *Store) scanPage(ctx context.Context, nowM types.AttributeValue) error {
	filter := "#exp <= :now AND attribute_exists(#tok)"
	names := []string{"#exp", "#tok", "#pk", "#part"}
	values := map[string]types.AttributeValue{":now": nowM}
	if s.opt.KeyPrefix != "" {
		filter += " AND begins_with(#pk, :prefix)"
		values[":prefix"] = str(s.opt.KeyPrefix)
	}
	proj := "#pk, #part"
	if s.opt.SortKey != "" {
		filter += " AND #sk = :skv"
		values[":skv"] = str(s.opt.SortKeyValue)
		proj += ", #sk"
		names = append(names, "#sk")
	}
	out, err := s.api.Scan(ctx, &dynamodb.ScanInput{
		TableName:                 &s.opt.Table,
		ExclusiveStartKey:         s.sweepFrom,
		Limit:                     aws.Int32(s.opt.SweepPageSize),
		FilterExpression:          &filter,
		ProjectionExpression:      &proj,
		ExpressionAttributeNames:  s.names(names...),
		ExpressionAttributeValues: values,
	})
	if err != nil {
		return err
	}
	s.sweepTodo = append(s.sweepTodo, out.Items...)
	s.sweepFrom = out.LastEvaluatedKey
	return nil
}

// SelfExpiring implements idem.SelfExpiring: it reports true, since every item carries a TTL
// attribute (expires_at plus TTLMargin) that DynamoDB deletes it by, once TTL is enabled on
// the table (CreateTable enables it). Sweep, a paid Scan, is optional.
func (s *Store) SelfExpiring() bool { return true }
