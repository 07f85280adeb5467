package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// heldCond is the condition every fenced write carries: the record is in progress with this
// token and was not released.
const heldCond = "#tok = :tok AND #st = :ip AND #exp <> :zero"

// Complete implements idem.Store. One conditional UpdateItem when the encoded response fits in
// PartSize bytes; otherwise one TransactWriteItems that updates the record and puts its part
// items, all or nothing.
func (s *Store) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	if err := s.begin(ctx, key); err != nil {
		return err
	}
	enc := storekit.EncodeResponse(resp)
	if len(enc) > MaxResponseBytes {
		return invalid("encoded response of %d bytes is larger than MaxResponseBytes (%d)", len(enc), MaxResponseBytes)
	}
	parts := (len(enc) + PartSize - 1) / PartSize
	parts = max(parts, 1)
	exp := micros(expiresAt)
	values := map[string]types.AttributeValue{
		":tok":  num(token),
		":ip":   str(stateInProgress),
		":zero": num(0),
		":done": str(stateCompleted),
		":resp": bin(enc[:min(len(enc), PartSize)]),
		":now":  num(micros(now)),
		":exp":  num(exp),
		":ttl":  num(s.ttl(exp)),
		// What a listing reads of the response, and the record's listing shard (already
		// there unless it was claimed by a version of the store without the listing index).
		":rhead": bin(enc[:min(len(enc), storekit.ListResponseHeadLen)]),
		":shard": num(listShard(key)),
	}
	update := "SET #st = :done, #resp = :resp, #completed = :now, #exp = :exp, #ttl = :ttl, #rhead = :rhead, #shard = :shard"
	names := []string{"#tok", "#st", "#exp", "#resp", "#completed", "#ttl", "#rhead", "#shard"}
	if parts > 1 {
		update += ", #parts = :parts"
		values[":parts"] = num(int64(parts))
		names = append(names, "#parts")
	}
	// The record's update, alone or as the first item of the transaction with the parts.
	rec := &types.Update{
		TableName:                 &s.opt.Table,
		Key:                       s.itemKey(key, 0),
		UpdateExpression:          &update,
		ConditionExpression:       aws.String(heldCond),
		ExpressionAttributeNames:  s.names(names...),
		ExpressionAttributeValues: values,
	}
	if parts == 1 {
		_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: rec.TableName, Key: rec.Key, UpdateExpression: rec.UpdateExpression,
			ConditionExpression: rec.ConditionExpression, ExpressionAttributeNames: rec.ExpressionAttributeNames,
			ExpressionAttributeValues: rec.ExpressionAttributeValues,
		})
		return fenced("complete", err)
	}
	items := []types.TransactWriteItem{{Update: rec}}
	for i := 1; i < parts; i++ {
		item := s.itemKey(key, i)
		item[attrPart] = num(int64(i))
		item[attrToken] = num(token)
		item[attrResponse] = bin(enc[i*PartSize : min(len(enc), (i+1)*PartSize)])
		item[attrExpiresAt] = num(exp)
		item[s.opt.TTLAttribute] = num(s.ttl(exp))
		items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &s.opt.Table, Item: item}})
	}
	for try := 0; ; try++ {
		_, err := s.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		var tce *types.TransactionCanceledException
		if err == nil || !errors.As(err, &tce) {
			return wrap("complete", err)
		}
		conflict := false
		for _, r := range tce.CancellationReasons {
			switch aws.ToString(r.Code) {
			case "ConditionalCheckFailed":
				return idem.ErrLeaseLost
			case "TransactionConflict":
				conflict = true
			}
		}
		if !conflict || try >= maxTries {
			return wrap("complete", err)
		}
		// Another write touched the record at the same moment: nothing was applied; the
		// condition decides on the next try.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(try+1) * 10 * time.Millisecond):
		}
	}
}

// fenced maps a failed condition to idem.ErrLeaseLost.
func fenced(op string, err error) error {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return idem.ErrLeaseLost
	}
	return wrap(op, err)
}

// Release implements idem.Store with one conditional UpdateItem. Like memstore, it keeps the
// record with ExpiresAt and LeaseUntil at the Unix epoch, so the next claim's token is larger;
// the storage TTL is left as it was.
func (s *Store) Release(ctx context.Context, key string, token int64) error {
	if err := s.begin(ctx, key); err != nil {
		return err
	}
	_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.opt.Table,
		Key:                       s.itemKey(key, 0),
		UpdateExpression:          aws.String("SET #exp = :zero, #lease = :zero"),
		ConditionExpression:       aws.String(heldCond),
		ExpressionAttributeNames:  s.names("#tok", "#st", "#exp", "#lease"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":tok": num(token), ":ip": str(stateInProgress), ":zero": num(0)},
	})
	return fenced("release", err)
}

// Extend implements idem.Store. One conditional UpdateItem when until is within the record's
// TTL (the heartbeat's case); when it is beyond, a second one that also moves ExpiresAt and
// the storage TTL.
func (s *Store) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if err := s.begin(ctx, key); err != nil {
		return err
	}
	u := micros(until)
	values := map[string]types.AttributeValue{":tok": num(token), ":ip": str(stateInProgress), ":zero": num(0), ":until": num(u)}
	for range maxTries {
		_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           &s.opt.Table,
			Key:                                 s.itemKey(key, 0),
			UpdateExpression:                    aws.String("SET #lease = :until"),
			ConditionExpression:                 aws.String(heldCond + " AND #exp >= :until"),
			ExpressionAttributeNames:            s.names("#tok", "#st", "#exp", "#lease"),
			ExpressionAttributeValues:           values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return wrap("extend", err)
		}
		old, _, derr := s.decode(key, ccf.Item)
		if ccf.Item == nil || derr != nil || old.Token != token || old.State != idem.StateInProgress || micros(old.ExpiresAt) == 0 {
			return idem.ErrLeaseLost
		}
		// Held, but until is past the TTL: move both.
		vals := map[string]types.AttributeValue{":tok": num(token), ":ip": str(stateInProgress), ":zero": num(0),
			":until": num(u), ":ttl": num(s.ttl(u))}
		_, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 &s.opt.Table,
			Key:                       s.itemKey(key, 0),
			UpdateExpression:          aws.String("SET #lease = :until, #exp = :until, #ttl = :ttl"),
			ConditionExpression:       aws.String(heldCond + " AND #exp < :until"),
			ExpressionAttributeNames:  s.names("#tok", "#st", "#exp", "#lease", "#ttl"),
			ExpressionAttributeValues: vals,
		})
		if !errors.As(err, &ccf) {
			return wrap("extend", err)
		}
		// The record changed between the two calls (another Extend): look again.
	}
	return wrap("extend", fmt.Errorf("key %q changed under %d consecutive conditional writes", key, maxTries))
}
