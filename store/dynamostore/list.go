package dynamostore

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/shardmerge"
	"github.com/idemkit/idem/store/internal/storeerr"
	"github.com/idemkit/idem/store/storekit"
)

var _ idem.Lister = (*Store)(nil)

// QueryAPI is the part of the DynamoDB client that List needs beyond API. *dynamodb.Client
// implements it.
type QueryAPI interface {
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

// List returns a page of records in key order or newest first (idem.Lister), for operators,
// through the table's listing indexes (ListIndex and NewestIndex, which CreateTable creates
// or adds): never a Scan.
//
// The index keeps every record's key, sorted, in each of ListShards partitions. A page reads
// the start of the key range (the prefix, after the cursor) in every partition (ListShards
// Queries of a few keys each), merges them in key order, and reads the candidate records
// with strongly consistent BatchGetItems of their attributes other than the response (a
// completed record keeps the head of its response apart for this), reading further in a
// partition only when the merge has used up what it read of it; the state and age filters
// are checked record by record. DynamoDB bills the Queries by the size of the keys they read
// and the reads by the size of the attributes read, never a stored body.
//
// Newest first, the same merge reads NewestIndex, whose partitions are the same ListShards
// groups and whose sort key is list_created (the creation time, zero-padded, then the key),
// each partition from its newest entry down (ScanIndexForward false), so a time range and a
// cursor are a range of each partition; the key prefix is checked record by record. A record
// whose created_at differs from its index entry's (claimed anew after it expired, and the
// index not caught up yet) is skipped there: its new entry lists it.
//
// A global secondary index is eventually consistent: a record claimed a moment ago may be
// missing from a page (usually for well under a second), and a deleted one is skipped. The
// records listed are read from the table itself. The client must implement QueryAPI (a
// *dynamodb.Client does); otherwise List fails with an error wrapping idem.ErrInvalidInput.
func (s *Store) List(ctx context.Context, q idem.ListQuery) (idem.ListPage, error) {
	b, err := storekit.Bounds(q)
	if err != nil {
		return idem.ListPage{}, err
	}
	if err := s.ready(ctx); err != nil {
		return idem.ListPage{}, err
	}
	api, ok := s.api.(QueryAPI)
	if !ok {
		return idem.ListPage{}, storeerr.Option("dynamostore", "Options.Client", "does not implement QueryAPI (Query), which List needs")
	}
	l := &lister{s: s, api: api, page: shardmerge.NewPage(b), newest: b.Newest}
	if b.Newest {
		// Entries from the newest down: before the cursor's (time, key) and CreatedBefore
		// (hi, inclusive here: Match leaves it out), at or after CreatedSince (lo).
		if b.CreatedBefore != 0 {
			l.hi = listCreated(b.CreatedBefore, "")
		}
		if b.HasAfter && (b.CreatedBefore == 0 || b.AfterCreated < b.CreatedBefore) {
			l.hi = listCreated(b.AfterCreated, b.After)
		}
		if b.HasSince {
			l.lo = listCreated(b.CreatedSince, "")
		}
		if l.hi != "" && l.lo > l.hi {
			return idem.ListPage{}, nil
		}
		if err := l.run(ctx); err != nil {
			return idem.ListPage{}, wrap("list", err)
		}
		return l.page.Result(), nil
	}
	// The range of partition keys to read: KeyPrefix + the listing's range, or every key
	// with KeyPrefix.
	l.lo = s.opt.KeyPrefix + b.From
	if b.HasAfter && b.After >= b.From {
		l.lo = s.opt.KeyPrefix + b.After // inclusive here; Match leaves the cursor's key out
	}
	switch {
	case b.To != "":
		l.hi = s.opt.KeyPrefix + b.To
	case s.opt.KeyPrefix != "":
		end, _ := storekit.Bounds(idem.ListQuery{Prefix: s.opt.KeyPrefix})
		l.hi = end.To
	}
	if l.hi != "" && l.lo >= l.hi {
		return idem.ListPage{}, nil
	}
	if err := l.run(ctx); err != nil {
		return idem.ListPage{}, wrap("list", err)
	}
	return l.page.Result(), nil
}

// lister is one List call: a k-way merge of the index partitions' key ranges.
type lister struct {
	s      *Store
	api    QueryAPI
	page   *shardmerge.Page
	newest bool   // read NewestIndex, newest first: the merge's keys are newestMember's
	lo, hi string // index sort keys k with lo <= k (and k < hi when hi is not ""; newest first, k <= hi)
	shards [ListShards]shardRange
	merge  *shardmerge.Merge
}

// shardRange is where a List call stands in one index partition.
type shardRange struct {
	from map[string]types.AttributeValue // where the next Query starts (its ExclusiveStartKey)
	n    int32                           // how many keys the next Query asks for
}

func (l *lister) run(ctx context.Context) error {
	l.merge = shardmerge.New(ListShards)
	if l.newest {
		l.merge = shardmerge.NewDescending(ListShards)
	}
	for i := range l.shards {
		l.shards[i].n = int32(min(2*l.page.Need/ListShards+4, idem.MaxListLimit))
	}
	return l.merge.Run(ctx, l.page.Want, l.read, l.check)
}

// read reads the next keys of the given partitions' ranges, one Query each, concurrently.
func (l *lister) read(ctx context.Context, shards []int) error {
	s := l.s
	cond := "#shard = :shard"
	names := []string{"#shard", "#pk"}
	index := ListIndex
	if l.newest {
		names[1], index = "#lcreated", NewestIndex
	}
	values := map[string]types.AttributeValue{}
	switch {
	case l.newest && l.hi != "":
		cond += " AND #lcreated <= :hi" // Match leaves the cursor's record out
		if l.lo != "" {
			cond = "#shard = :shard AND #lcreated BETWEEN :lo AND :hi"
			values[":lo"] = str(l.lo)
		}
		values[":hi"] = str(l.hi)
	case l.newest && l.lo != "":
		cond += " AND #lcreated >= :lo"
		values[":lo"] = str(l.lo)
	case l.newest:
		names = names[:1]
	case l.lo != "" && l.hi != "":
		cond += " AND #pk BETWEEN :lo AND :hi" // hi is inclusive here; Match leaves it out
		values[":lo"], values[":hi"] = str(l.lo), str(l.hi)
	case l.lo != "":
		cond += " AND #pk >= :lo"
		values[":lo"] = str(l.lo)
	case l.hi != "":
		cond += " AND #pk < :hi"
		values[":hi"] = str(l.hi)
	default:
		names = names[:1] // every key
	}
	outs := make([]*dynamodb.QueryOutput, len(shards))
	errs := make(chan error, len(shards))
	for i, sh := range shards {
		vals := make(map[string]types.AttributeValue, len(values)+1)
		for k, v := range values {
			vals[k] = v
		}
		vals[":shard"] = num(int64(sh))
		in := &dynamodb.QueryInput{
			TableName:                 &s.opt.Table,
			IndexName:                 aws.String(index),
			ScanIndexForward:          aws.Bool(!l.newest),
			KeyConditionExpression:    &cond,
			ExpressionAttributeNames:  s.names(names...),
			ExpressionAttributeValues: vals,
			ExclusiveStartKey:         l.shards[sh].from,
			Limit:                     aws.Int32(l.shards[sh].n),
		}
		go func() {
			var err error
			outs[i], err = l.api.Query(ctx, in)
			errs <- err
		}()
	}
	var err error
	for range shards {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return err
	}
	pk := s.opt.PartitionKey
	for i, sh := range shards {
		r := &l.shards[sh]
		var keys []string
		for _, it := range outs[i].Items {
			k, _ := it[pk].(*types.AttributeValueMemberS)
			if k == nil || len(k.Value) < len(s.opt.KeyPrefix) || k.Value[:len(s.opt.KeyPrefix)] != s.opt.KeyPrefix {
				continue // not one of this store's records
			}
			if s.opt.SortKey != "" {
				if sk, _ := it[s.opt.SortKey].(*types.AttributeValueMemberS); sk == nil || sk.Value != s.opt.SortKeyValue {
					continue
				}
			}
			key := k.Value[len(s.opt.KeyPrefix):]
			if l.newest {
				lc, _ := it[attrListCreated].(*types.AttributeValueMemberS)
				if lc == nil || len(lc.Value) < 16 {
					continue
				}
				key = newestMember(lc.Value[:16], key)
			}
			keys = append(keys, key)
		}
		r.from = outs[i].LastEvaluatedKey
		r.n = min(2*r.n, idem.MaxListLimit)
		// A page of other items only, with more after it, blocks the merge until read on.
		l.merge.Add(sh, keys, r.from != nil)
	}
	return nil
}

// listAttrs are the attributes List reads of a record: all but the response.
var listAttrs = []string{"#pk", "#fp", "#st", "#tok", "#lease", "#att", "#created", "#completed", "#exp", "#rhead", "#route", "#starts"}

// check reads the records of keys (in key order; newest first, newestMember's) and keeps
// those that match.
func (l *lister) check(ctx context.Context, keys []string) error {
	var members []string
	if l.newest {
		members, keys = keys, make([]string, len(keys))
		for i, m := range members {
			keys[i] = m[16:]
		}
	}
	items, err := l.get(ctx, keys, listAttrs)
	if err != nil {
		return err
	}
	// Completed records without a response head (completed by a version of the store that
	// did not keep one) need their response read.
	var old []string
	for _, k := range keys {
		if it := items[k]; it != nil && it[attrResponseHead] == nil {
			if st, _ := it[attrState].(*types.AttributeValueMemberS); st != nil && st.Value == stateCompleted {
				old = append(old, k)
			}
		}
	}
	if len(old) > 0 {
		resps, err := l.get(ctx, old, []string{"#pk", "#resp"})
		if err != nil {
			return err
		}
		for _, k := range old {
			if r, ok := resps[k][attrResponse].(*types.AttributeValueMemberB); ok && items[k] != nil {
				items[k][attrResponseHead] = bin(r.Value[:min(len(r.Value), storekit.ListResponseHeadLen)])
			}
		}
	}
	for i, k := range keys {
		it := items[k]
		if it == nil {
			continue // deleted since the index listed it
		}
		rec, err := decodeMeta(k, it)
		if err != nil {
			return err
		}
		if l.newest && newestMember(listCreated(rec.CreatedAt.UnixMicro(), "")[:16], k) != members[i] {
			continue // claimed anew since the index entry: its new entry lists it
		}
		if rec.State == idem.StateCompleted {
			head, _ := it[attrResponseHead].(*types.AttributeValueMemberB)
			if head == nil {
				return fmt.Errorf("%w: record %q: completed without a response", idem.ErrCorruptRecord, k)
			}
			resp, err := storekit.DecodeResponseHead(head.Value)
			if err != nil {
				return fmt.Errorf("record %q: %w", k, err)
			}
			rec.Response = &resp
		}
		l.page.Keep(k, rec)
	}
	return nil
}

// get reads the given attributes of the records of keys with strongly consistent
// BatchGetItems of at most 100 keys, and returns them by key.
func (l *lister) get(ctx context.Context, keys []string, attrs []string) (map[string]map[string]types.AttributeValue, error) {
	s := l.s
	proj := ""
	for i, a := range attrs {
		if i > 0 {
			proj += ", "
		}
		proj += a
	}
	names := s.names(attrs...)
	items := make(map[string]map[string]types.AttributeValue, len(keys))
	for len(keys) > 0 {
		n := min(len(keys), 100)
		req := make([]map[string]types.AttributeValue, n)
		for i, k := range keys[:n] {
			req[i] = s.itemKey(k, 0)
		}
		keys = keys[n:]
		for tries := 0; len(req) > 0; tries++ {
			out, err := s.api.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
				s.opt.Table: {Keys: req, ConsistentRead: aws.Bool(true), ProjectionExpression: &proj, ExpressionAttributeNames: names},
			}})
			if err != nil {
				return nil, err
			}
			for _, it := range out.Responses[s.opt.Table] {
				if pk, ok := it[s.opt.PartitionKey].(*types.AttributeValueMemberS); ok && len(pk.Value) >= len(s.opt.KeyPrefix) {
					items[pk.Value[len(s.opt.KeyPrefix):]] = it
				}
			}
			req = out.UnprocessedKeys[s.opt.Table].Keys
			if len(req) > 0 {
				select { // DynamoDB asks us to slow down
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-time.After(time.Duration(20*(tries+1)) * time.Millisecond):
				}
			}
		}
	}
	return items, nil
}
