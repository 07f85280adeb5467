package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
)

var (
	_ idem.Store        = (*Store)(nil)
	_ idem.Deleter      = (*Store)(nil)
	_ idem.SelfExpiring = (*Store)(nil)
)

// API is the part of the DynamoDB client the store uses. *dynamodb.Client implements it; tests
// and instrumentation may wrap it.
type API interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// Options configure a Store. Only Client and Table are required; the zero value of every other
// field is a working default.
type Options struct {
	// Client is the DynamoDB client, usually a *dynamodb.Client. Required. Its retryer answers
	// throttling (ProvisionedThroughputExceededException, ThrottlingException) with bounded,
	// jittered retries: 4 attempts by default for DynamoDB clients.
	Client API
	// Table is the table name. Required.
	Table string
	// PartitionKey is the name of the table's partition key attribute, of type String.
	// Default "pk".
	PartitionKey string
	// SortKey is the name of the table's sort key attribute, of type String, for a table that
	// has one (a single-table design). Default "": the table has no sort key.
	SortKey string
	// SortKeyValue is the fixed sort key value of every item the store writes. Default "idem"
	// when SortKey is set; must be empty when it is not.
	SortKeyValue string
	// KeyPrefix is put in front of every key in the partition key, to share a table with other
	// items (a single-table design) or with other stores. Default "". Sweep only scans items
	// whose partition key has this prefix.
	KeyPrefix string
	// TTLAttribute names the Number attribute holding each item's DynamoDB TTL in Unix
	// seconds. Default "ttl". Enable TTL on it (CreateTable does) so DynamoDB deletes old
	// records for free; idem never relies on it (invariant 5: expires_at decides).
	TTLAttribute string
	// TTLMargin is how far beyond expires_at the storage TTL is set, so clock skew between
	// idem and DynamoDB can never delete a live record. Default 1h.
	TTLMargin time.Duration
	// SweepPageSize is how many items one Scan page of Sweep evaluates (Scan's Limit).
	// Default 1000.
	SweepPageSize int32
	// SweepMaxPages bounds the Scan pages one Sweep call reads. Default 10. A call that hits
	// it returns what it deleted so far; the next call continues where it stopped.
	SweepMaxPages int
}

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

	stateInProgress = "in_progress"
	stateCompleted  = "completed"
)

const (
	// PartSize is the largest piece of an encoded response kept in one item. DynamoDB items
	// hold at most 400 KiB; the rest of the budget is left for the key and the other
	// attributes.
	PartSize = 384 << 10
	// MaxParts is how many items one response may span: the record and MaxParts-1 part items,
	// written in one transaction (DynamoDB transactions carry at most 4 MB).
	MaxParts = 10
	// MaxResponseBytes is the largest encoded response (idem.EncodeResponse) the store keeps.
	// Complete refuses a larger one with an error wrapping idem.ErrInvalidInput and changes
	// nothing; keep HTTP body limits below it.
	MaxResponseBytes = PartSize * MaxParts
	// MaxKeyBytes bounds len(KeyPrefix)+len(key): DynamoDB partition keys hold at most 2048
	// bytes and part items add a 3-byte suffix.
	MaxKeyBytes = 2048 - 3
)

// maxTries bounds the conditional writes of one Reserve or Extend. A retry happens only when
// another writer changed the record between two of our calls, so each one is someone's progress.
const maxTries = 8

// Store is an idem.Store on Amazon DynamoDB. It is safe for concurrent use by many goroutines
// and processes. Create it with New.
type Store struct {
	api    API
	opt    Options
	closed atomic.Bool

	sweepMu   sync.Mutex
	sweepFrom map[string]types.AttributeValue   // where the next Scan page starts
	sweepTodo []map[string]types.AttributeValue // candidates found but not yet deleted
}

// New returns a Store. It fails with an error wrapping idem.ErrInvalidInput, naming the field,
// when an option is invalid. It makes no call to DynamoDB (see CreateTable).
func New(opt Options) (*Store, error) {
	opt.PartitionKey = cmp.Or(opt.PartitionKey, "pk")
	if opt.SortKey != "" {
		opt.SortKeyValue = cmp.Or(opt.SortKeyValue, "idem")
	}
	opt.TTLAttribute = cmp.Or(opt.TTLAttribute, "ttl")
	opt.TTLMargin = cmp.Or(opt.TTLMargin, time.Hour)
	opt.SweepPageSize = cmp.Or(opt.SweepPageSize, 1000)
	opt.SweepMaxPages = cmp.Or(opt.SweepMaxPages, 10)
	switch {
	case opt.Client == nil:
		return nil, invalid("Options.Client is nil")
	case opt.Table == "":
		return nil, invalid("Options.Table is empty")
	case opt.SortKey == "" && opt.SortKeyValue != "":
		return nil, invalid("Options.SortKeyValue is set but Options.SortKey is empty")
	case !validText(opt.KeyPrefix):
		return nil, invalid("Options.KeyPrefix is not UTF-8 without NUL")
	case len(opt.KeyPrefix) >= MaxKeyBytes:
		return nil, invalid("Options.KeyPrefix of %d bytes is too long", len(opt.KeyPrefix))
	case len(opt.SortKeyValue) > 1024:
		return nil, invalid("Options.SortKeyValue is longer than 1024 bytes")
	case opt.TTLMargin < 0:
		return nil, invalid("Options.TTLMargin %s is negative", opt.TTLMargin)
	case opt.SweepPageSize < 0:
		return nil, invalid("Options.SweepPageSize %d is negative", opt.SweepPageSize)
	case opt.SweepMaxPages < 0:
		return nil, invalid("Options.SweepMaxPages %d is negative", opt.SweepMaxPages)
	}
	names := map[string]bool{}
	for _, n := range []string{opt.PartitionKey, opt.SortKey, opt.TTLAttribute, attrFingerprint, attrState, attrToken,
		attrLeaseUntil, attrAttempts, attrResponse, attrParts, attrCreatedAt, attrCompletedAt, attrExpiresAt, attrPart} {
		if n == "" {
			continue
		}
		if names[n] {
			return nil, invalid("attribute name %q is used twice (Options.PartitionKey, SortKey and TTLAttribute must differ from each other and from the record's attributes)", n)
		}
		names[n] = true
	}
	return &Store{api: opt.Client, opt: opt}, nil
}

// Options returns the store's options with defaults filled in.
func (s *Store) Options() Options { return s.opt }

// Close makes every later call fail with an error matching idem.ErrStoreUnavailable. It does
// not touch the client, which the caller owns. It is safe to call more than once.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// Error is the type of every failure of a DynamoDB call (network, throttling past the
// retryer, service error): an *idem.StoreError, which matches idem.ErrStoreUnavailable with
// errors.Is and unwraps to the SDK's error.
//
// Deprecated: use idem.StoreError.
type Error = idem.StoreError

func invalid(format string, args ...any) error {
	return fmt.Errorf("dynamostore: %w: "+format, append([]any{idem.ErrInvalidInput}, args...)...)
}

func validText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// begin checks what every operation checks first.
func (s *Store) begin(ctx context.Context, op, key string) error {
	if s.closed.Load() {
		return idem.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := idem.CheckKey(key); err != nil {
		return err
	}
	if len(s.opt.KeyPrefix)+len(key) > MaxKeyBytes {
		return invalid("key of %d bytes is too long (KeyPrefix plus key at most %d)", len(key), MaxKeyBytes)
	}
	return nil
}

// wrap turns an SDK error into an *idem.StoreError of op.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return &idem.StoreError{Op: op, Err: fmt.Errorf("dynamostore: %w", err)}
}

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
	}
	panic("dynamostore: unknown placeholder " + placeholder) // a bug in this file, not input
}

// Reserve implements idem.Store.
//
// Calls (each one DynamoDB request, retried by the SDK's retryer on throttling):
//   - absent key, or a record that expired (or was released) with a token below now in Unix
//     microseconds: one conditional PutItem that claims it;
//   - a live record (a duplicate, a replay, an in-flight or mismatching request): the same
//     one PutItem, whose failed condition returns the record (ALL_OLD); nothing is written;
//   - a takeover of a stale lease: that PutItem, then a second PutItem conditioned on the old
//     token, which carries Attempts+1 and the original CreatedAt;
//   - an expired record whose token is not below now (same microsecond, or a clock behind
//     the one that claimed it): that PutItem, then a second one with token prev+1
//     conditioned on the old token;
//   - a completed record whose response spans parts: plus one BatchGetItem for the parts.
//
// A second write that loses to a concurrent writer re-evaluates the record it returns, a
// bounded number of times.
func (s *Store) Reserve(ctx context.Context, key, fingerprint string, now time.Time, lease, window time.Duration) (idem.Reservation, error) {
	if err := s.begin(ctx, "reserve", key); err != nil {
		return idem.Reservation{}, err
	}
	if !validText(fingerprint) {
		return idem.Reservation{}, invalid("fingerprint is not UTF-8 without NUL")
	}
	now = now.Truncate(time.Microsecond)
	nowM := micros(now)
	leaseUntil := micros(now.Add(lease))
	expires := micros(now.Add(window))

	// First try: a fresh claim of an absent or expired key, token = now in microseconds.
	claim := idem.Record{Key: key, Fingerprint: fingerprint, State: idem.StateInProgress, Token: nowM, Attempts: 1,
		CreatedAt: now, LeaseUntil: time.UnixMicro(leaseUntil), ExpiresAt: time.UnixMicro(expires)}
	cond := "attribute_not_exists(#pk) OR (#exp <= :now AND #tok < :tok)"
	condNames := []string{"#pk", "#exp", "#tok"}
	var prev int64
	takeover := false
	for range maxTries {
		item := s.itemKey(key, 0)
		item[attrFingerprint] = str(fingerprint)
		item[attrState] = str(stateInProgress)
		item[attrToken] = num(claim.Token)
		item[attrLeaseUntil] = num(leaseUntil)
		item[attrAttempts] = num(int64(claim.Attempts))
		item[attrCreatedAt] = num(micros(claim.CreatedAt))
		item[attrExpiresAt] = num(expires)
		item[s.opt.TTLAttribute] = num(s.ttl(expires))
		values := map[string]types.AttributeValue{":now": num(nowM)}
		if strings.Contains(cond, ":tok") {
			values[":tok"] = num(claim.Token)
		}
		if strings.Contains(cond, ":prev") {
			values[":prev"] = num(prev)
		}
		if strings.Contains(cond, ":fp") {
			values[":fp"] = str(fingerprint)
		}
		if strings.Contains(cond, ":ip") {
			values[":ip"] = str(stateInProgress)
		}
		_, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           &s.opt.Table,
			Item:                                item,
			ConditionExpression:                 &cond,
			ExpressionAttributeNames:            s.names(condNames...),
			ExpressionAttributeValues:           values,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return idem.Reservation{Claimed: true, Takeover: takeover, Record: claim}, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return idem.Reservation{}, wrap("reserve", err)
		}
		if ccf.Item == nil {
			// The record vanished between the condition and its report (a sweep or TTL
			// deletion): start again with a fresh claim.
			cond, condNames = "attribute_not_exists(#pk) OR (#exp <= :now AND #tok < :tok)", []string{"#pk", "#exp", "#tok"}
			claim.Token, claim.Attempts, claim.CreatedAt, takeover = nowM, 1, now, false
			continue
		}
		old, parts, err := s.decode(key, ccf.Item)
		if err != nil {
			return idem.Reservation{}, wrap("reserve", err)
		}
		prev = old.Token
		claim.Token = idem.NextToken(prev, now)
		switch {
		case old.Expired(now):
			// Expired or released, but its token is not below now: claim with prev+1.
			cond, condNames = "#tok = :prev AND #exp <= :now", []string{"#tok", "#exp"}
			claim.Attempts, claim.CreatedAt, takeover = 1, now, false
		case old.LeaseExpired(now) && old.Fingerprint == fingerprint:
			cond = "#tok = :prev AND #st = :ip AND #lease <= :now AND #exp > :now AND #fp = :fp"
			condNames = []string{"#tok", "#st", "#lease", "#exp", "#fp"}
			claim.Attempts, claim.CreatedAt, takeover = old.Attempts+1, old.CreatedAt, true
		default:
			if parts > 1 {
				ok, err := s.loadParts(ctx, key, &old, parts)
				if err != nil {
					return idem.Reservation{}, wrap("reserve", err)
				}
				if !ok { // replaced while we read it: look again
					cond, condNames = "attribute_not_exists(#pk) OR (#exp <= :now AND #tok < :tok)", []string{"#pk", "#exp", "#tok"}
					claim.Token, claim.Attempts, claim.CreatedAt, takeover = nowM, 1, now, false
					continue
				}
			}
			return idem.Reservation{Record: old}, nil
		}
	}
	return idem.Reservation{}, wrap("reserve", fmt.Errorf("key %q changed under %d consecutive conditional writes", key, maxTries))
}

// heldCond is the condition every fenced write carries: the record is in progress with this
// token and was not released.
const heldCond = "#tok = :tok AND #st = :ip AND #exp <> :zero"

// Complete implements idem.Store. One conditional UpdateItem when the encoded response fits in
// PartSize bytes; otherwise one TransactWriteItems that updates the record and puts its part
// items, all or nothing.
func (s *Store) Complete(ctx context.Context, key string, token int64, resp idem.Response, now, expiresAt time.Time) error {
	if err := s.begin(ctx, "complete", key); err != nil {
		return err
	}
	enc := idem.EncodeResponse(resp)
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
	}
	update := "SET #st = :done, #resp = :resp, #completed = :now, #exp = :exp, #ttl = :ttl"
	names := []string{"#tok", "#st", "#exp", "#resp", "#completed", "#ttl"}
	if parts > 1 {
		update += ", #parts = :parts"
		values[":parts"] = num(int64(parts))
		names = append(names, "#parts")
	}
	if parts == 1 {
		_, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                 &s.opt.Table,
			Key:                       s.itemKey(key, 0),
			UpdateExpression:          &update,
			ConditionExpression:       aws.String(heldCond),
			ExpressionAttributeNames:  s.names(names...),
			ExpressionAttributeValues: values,
		})
		return fenced("complete", err)
	}
	items := []types.TransactWriteItem{{Update: &types.Update{
		TableName:                 &s.opt.Table,
		Key:                       s.itemKey(key, 0),
		UpdateExpression:          &update,
		ConditionExpression:       aws.String(heldCond),
		ExpressionAttributeNames:  s.names(names...),
		ExpressionAttributeValues: values,
	}}}
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
	if err := s.begin(ctx, "release", key); err != nil {
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
// window (the heartbeat's case); when it is beyond, a second one that also moves ExpiresAt and
// the storage TTL.
func (s *Store) Extend(ctx context.Context, key string, token int64, until time.Time) error {
	if err := s.begin(ctx, "extend", key); err != nil {
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
		// Held, but until is past the window: move both.
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

// Get implements idem.Store with one strongly consistent GetItem, plus one BatchGetItem for a
// response that spans parts.
func (s *Store) Get(ctx context.Context, key string) (idem.Record, error) {
	if err := s.begin(ctx, "get", key); err != nil {
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
	resp, err := idem.DecodeResponse(enc)
	if err != nil {
		return false, err
	}
	rec.Response = &resp
	return true, nil
}

// decode reads a record item. For a completed record whose response spans more than one part
// it returns the number of parts and leaves the raw first part in Response.Body for
// loadParts to finish.
func (s *Store) decode(key string, it map[string]types.AttributeValue) (idem.Record, int, error) {
	rec := idem.Record{Key: key}
	bad := func(what string) (idem.Record, int, error) {
		return idem.Record{}, 0, fmt.Errorf("%w: record %q: %s", idem.ErrCorruptRecord, key, what)
	}
	fp, ok := it[attrFingerprint].(*types.AttributeValueMemberS)
	if !ok {
		return bad("no fingerprint")
	}
	rec.Fingerprint = fp.Value
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
	rec.Attempts = int(n)
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
	if rec.State != idem.StateCompleted {
		return rec, 0, nil
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
	resp, err := idem.DecodeResponse(raw.Value)
	if err != nil {
		return idem.Record{}, 0, fmt.Errorf("record %q: %w", key, err)
	}
	rec.Response = &resp
	return rec, 1, nil
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

// Delete removes key's record whatever its state, with its part items (idem.Deleter): one
// DeleteItem, plus one per part of a large response. It is for operators (`idem release
// --force`); a deleted completed record lets its key execute again. Deleting a missing key is
// not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.begin(ctx, "delete", key); err != nil {
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
