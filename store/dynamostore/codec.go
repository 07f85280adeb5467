package dynamostore

import (
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// Item layout. Every attribute name below, and the configurable key and TTL names, are always
// passed as expression attribute names, so reserved words (state, token, ttl) are safe.
const (
	attrFingerprint = "fingerprint"
	attrState       = "state"
	attrToken       = "token"
	attrLeaseUntil  = "lease_until"
	attrAttempts    = "attempts"
	attrResponse    = "response"
	attrParts       = "parts"
	attrCreatedAt   = "created_at"
	attrCompletedAt = "completed_at"
	attrExpiresAt   = "expires_at"
	attrPart        = "part" // on part items only: the part's index (1…parts-1)
	// attrListShard, on records only, is the partition key of the listing index: one of
	// ListShards groups (listShard). The index's sort key is the table's partition key.
	attrListShard = "list_shard"
	// attrListCreated, on records only, is the sort key of the newest-first index
	// (NewestIndex): the record's created_at in 16 zero-padded decimal digits of Unix
	// microseconds, then its key (listCreated).
	attrListCreated = "list_created"
	// attrResponseHead, on completed records, holds the first storekit.ListResponseHeadLen bytes
	// of the encoded response: what a listing shows of it (status, body omitted).
	attrResponseHead = "response_head"
	// attrRoute, on records with a route (idem.Record.Route), is that route; a record
	// without one has no such attribute.
	attrRoute = "route"
	// attrStarts is idem.Record.Starts: how many times the record's effect was started. A
	// record written before starts were counted has none, and its start count is its attempts.
	attrStarts = "starts"
	// attrRequest, on records that keep the request their client sent (idem.Record.Request),
	// is its storekit.EncodeRequest encoding; a record without one has no such attribute, so
	// it is the same item as before requests were kept.
	attrRequest = "request"

	stateInProgress = "in_progress"
	stateCompleted  = "completed"
)

// itemKey returns the primary key of the record of key, or of its part n when n > 0.
func (s *Store) itemKey(key string, part int) map[string]types.AttributeValue {
	pk := s.opt.KeyPrefix + key
	if part > 0 {
		pk += "\x00" + strconv.Itoa(part)
	}
	k := map[string]types.AttributeValue{s.opt.PartitionKey: str(pk)}
	if s.opt.SortKey != "" {
		k[s.opt.SortKey] = str(s.opt.SortKeyValue)
	}
	return k
}

func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func bin(v []byte) types.AttributeValue { return &types.AttributeValueMemberB{Value: v} }

// micros returns t in Unix microseconds, the unit of every stored time.
func micros(t time.Time) int64 { return t.UnixMicro() }

// ttl returns the storage TTL, in Unix seconds, for a record that expires at expMicro.
func (s *Store) ttl(expMicro int64) int64 {
	return (expMicro+999_999)/1_000_000 + int64(s.opt.TTLMargin/time.Second)
}

// names returns expression attribute names for the given placeholders (#pk, #st, …).
func (s *Store) names(placeholders ...string) map[string]string {
	m := make(map[string]string, len(placeholders))
	for _, p := range placeholders {
		m[p] = s.attrName(p)
	}
	return m
}

func (s *Store) attrName(placeholder string) string {
	switch placeholder {
	case "#pk":
		return s.opt.PartitionKey
	case "#sk":
		return s.opt.SortKey
	case "#ttl":
		return s.opt.TTLAttribute
	case "#fp":
		return attrFingerprint
	case "#st":
		return attrState
	case "#tok":
		return attrToken
	case "#lease":
		return attrLeaseUntil
	case "#att":
		return attrAttempts
	case "#starts":
		return attrStarts
	case "#resp":
		return attrResponse
	case "#parts":
		return attrParts
	case "#created":
		return attrCreatedAt
	case "#completed":
		return attrCompletedAt
	case "#exp":
		return attrExpiresAt
	case "#part":
		return attrPart
	case "#shard":
		return attrListShard
	case "#lcreated":
		return attrListCreated
	case "#rhead":
		return attrResponseHead
	case "#route":
		return attrRoute
	case "#req":
		return attrRequest
	}
	panic("dynamostore: unknown placeholder " + placeholder) // a bug in this file, not input
}

// decode reads a record item. For a completed record whose response spans more than one part
// it returns the number of parts and leaves the raw first part in Response.Body for
// loadParts to finish.
func (s *Store) decode(key string, it map[string]types.AttributeValue) (idem.Record, int, error) {
	rec, err := decodeMeta(key, it)
	if err != nil || rec.State != idem.StateCompleted {
		return rec, 0, err
	}
	bad := func(what string) (idem.Record, int, error) {
		return idem.Record{}, 0, fmt.Errorf("%w: record %q: %s", idem.ErrCorruptRecord, key, what)
	}
	raw, ok := it[attrResponse].(*types.AttributeValueMemberB)
	if !ok {
		return bad("completed without a response")
	}
	parts := int64(1)
	if _, present := it[attrParts]; present {
		if parts, err = getNum(it, attrParts); err != nil || parts < 1 || parts > MaxParts {
			return bad("bad parts")
		}
	}
	if parts > 1 {
		rec.Response = &idem.Response{Body: raw.Value}
		return rec, int(parts), nil
	}
	resp, err := storekit.DecodeResponse(raw.Value)
	if err != nil {
		return idem.Record{}, 0, fmt.Errorf("record %q: %w", key, err)
	}
	rec.Response = &resp
	return rec, 1, nil
}

// decodeMeta reads a record item's attributes other than its response.
func decodeMeta(key string, it map[string]types.AttributeValue) (idem.Record, error) {
	rec := idem.Record{Key: key}
	bad := func(what string) (idem.Record, error) {
		return idem.Record{}, fmt.Errorf("%w: record %q: %s", idem.ErrCorruptRecord, key, what)
	}
	fp, ok := it[attrFingerprint].(*types.AttributeValueMemberS)
	if !ok {
		return bad("no fingerprint")
	}
	rec.Fingerprint = fp.Value
	if r, present := it[attrRoute]; present {
		rs, ok := r.(*types.AttributeValueMemberS)
		if !ok {
			return bad("route is not a string")
		}
		rec.Route = rs.Value
	}
	if r, present := it[attrRequest]; present {
		rb, ok := r.(*types.AttributeValueMemberB)
		if !ok {
			return bad("request is not binary")
		}
		req, err := storekit.DecodeRequest(rb.Value)
		if err != nil {
			return idem.Record{}, fmt.Errorf("record %q: %w", key, err)
		}
		rec.Request = &req
	}
	st, _ := it[attrState].(*types.AttributeValueMemberS)
	switch {
	case st != nil && st.Value == stateInProgress:
		rec.State = idem.StateInProgress
	case st != nil && st.Value == stateCompleted:
		rec.State = idem.StateCompleted
	default:
		return bad("bad state")
	}
	var err error
	if rec.Token, err = getNum(it, attrToken); err != nil {
		return bad(err.Error())
	}
	n, err := getNum(it, attrAttempts)
	if err != nil {
		return bad(err.Error())
	}
	rec.Attempts, rec.Starts = int(n), int(n)
	if _, present := it[attrStarts]; present {
		s, err := getNum(it, attrStarts)
		if err != nil {
			return bad(err.Error())
		}
		rec.Starts = int(max(s, n))
	}
	for _, f := range []struct {
		name     string
		dst      *time.Time
		optional bool
	}{{attrLeaseUntil, &rec.LeaseUntil, false}, {attrCreatedAt, &rec.CreatedAt, false},
		{attrExpiresAt, &rec.ExpiresAt, false}, {attrCompletedAt, &rec.CompletedAt, true}} {
		if _, present := it[f.name]; !present && f.optional {
			continue
		}
		v, err := getNum(it, f.name)
		if err != nil {
			return bad(err.Error())
		}
		*f.dst = time.UnixMicro(v)
	}
	return rec, nil
}

func getNum(it map[string]types.AttributeValue, name string) (int64, error) {
	v, ok := it[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("attribute %s missing or not a number", name)
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("attribute %s: %v", name, err)
	}
	return n, nil
}
