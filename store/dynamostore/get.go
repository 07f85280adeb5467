package dynamostore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// Get implements idem.Store with one strongly consistent GetItem, plus one BatchGetItem for a
// response that spans parts.
func (s *Store) Get(ctx context.Context, key string) (idem.Record, error) {
	if err := s.begin(ctx, key); err != nil {
		return idem.Record{}, err
	}
	for range maxTries {
		out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{
			TableName:      &s.opt.Table,
			Key:            s.itemKey(key, 0),
			ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return idem.Record{}, wrap("get", err)
		}
		if out.Item == nil {
			return idem.Record{}, idem.ErrNotFound
		}
		rec, parts, err := s.decode(key, out.Item)
		if err != nil {
			return idem.Record{}, wrap("get", err)
		}
		if parts <= 1 {
			return rec, nil
		}
		ok, err := s.loadParts(ctx, key, &rec, parts)
		if err != nil {
			return idem.Record{}, wrap("get", err)
		}
		if ok {
			return rec, nil
		}
		if rec.Expired(time.Now()) {
			// Its parts were deleted (TTL or Sweep) before the record itself: it is gone.
			return idem.Record{}, idem.ErrNotFound
		}
	}
	return idem.Record{}, wrap("get", fmt.Errorf("key %q changed under %d consecutive reads", key, maxTries))
}

// loadParts reads parts 1…n-1 of rec's response and decodes the whole. It reports false when
// a part is missing or belongs to another claim (the record was replaced meanwhile).
func (s *Store) loadParts(ctx context.Context, key string, rec *idem.Record, n int) (bool, error) {
	if n > MaxParts {
		return false, fmt.Errorf("%w: record %q claims %d parts", idem.ErrCorruptRecord, key, n)
	}
	keys := make([]map[string]types.AttributeValue, 0, n-1)
	for i := 1; i < n; i++ {
		keys = append(keys, s.itemKey(key, i))
	}
	chunks := make([][]byte, n)
	chunks[0] = rec.Response.Body // decode left the raw first part here
	pkAttr := s.opt.PartitionKey
	prefix := s.opt.KeyPrefix + key + "\x00"
	for len(keys) > 0 {
		out, err := s.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			s.opt.Table: {Keys: keys, ConsistentRead: aws.Bool(true)},
		}})
		if err != nil {
			return false, err
		}
		for _, it := range out.Responses[s.opt.Table] {
			pk, _ := it[pkAttr].(*types.AttributeValueMemberS)
			data, _ := it[attrResponse].(*types.AttributeValueMemberB)
			tok, err1 := getNum(it, attrToken)
			idx, err2 := getNum(it, attrPart)
			if pk == nil || data == nil || err1 != nil || err2 != nil || !strings.HasPrefix(pk.Value, prefix) ||
				idx < 1 || idx >= int64(n) || pk.Value[len(prefix):] != strconv.FormatInt(idx, 10) {
				return false, fmt.Errorf("%w: bad part item for %q", idem.ErrCorruptRecord, key)
			}
			if tok != rec.Token {
				return false, nil
			}
			chunks[idx] = data.Value
		}
		keys = out.UnprocessedKeys[s.opt.Table].Keys
		if len(keys) > 0 {
			select { // DynamoDB asks us to slow down
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	var enc []byte
	for i, c := range chunks {
		if c == nil && i > 0 {
			return false, nil // a part is missing
		}
		enc = append(enc, c...)
	}
	resp, err := storekit.DecodeResponse(enc)
	if err != nil {
		return false, err
	}
	rec.Response = &resp
	return true, nil
}

// Delete removes key's record whatever its state, with its part items (idem.Deleter): one
// DeleteItem, plus one per part of a large response. It is for operators (`idem release
// --force`); a deleted completed record lets its key execute again. Deleting a missing key is
// not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.begin(ctx, key); err != nil {
		return err
	}
	out, err := s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:    &s.opt.Table,
		Key:          s.itemKey(key, 0),
		ReturnValues: types.ReturnValueAllOld,
	})
	if err != nil {
		return wrap("delete", err)
	}
	parts, _ := getNum(out.Attributes, attrParts)
	for i := 1; i < int(min(parts, MaxParts)); i++ {
		if _, err := s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.opt.Table, Key: s.itemKey(key, i)}); err != nil {
			return wrap("delete", err) // the record is gone; leftover parts expire with their TTL
		}
	}
	return nil
}
