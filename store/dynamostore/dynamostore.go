package dynamostore

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/internal/storeerr"
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
	// records for free; idem never relies on it (expires_at decides).
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

const (
	// PartSize is the largest piece of an encoded response kept in one item. DynamoDB items
	// hold at most 400 KiB; the rest of the budget is left for the key and the other
	// attributes.
	PartSize = 384 << 10
	// MaxParts is how many items one response may span: the record and MaxParts-1 part items,
	// written in one transaction (DynamoDB transactions carry at most 4 MB).
	MaxParts = 10
	// MaxResponseBytes is the largest encoded response (storekit.EncodeResponse) the store keeps.
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
		return nil, storeerr.Option("dynamostore", "Options.Client", "is nil")
	case opt.Table == "":
		return nil, storeerr.Option("dynamostore", "Options.Table", "is empty")
	case opt.SortKey == "" && opt.SortKeyValue != "":
		return nil, storeerr.Option("dynamostore", "Options.SortKeyValue", "is set but Options.SortKey is empty")
	case !validText(opt.KeyPrefix):
		return nil, storeerr.Option("dynamostore", "Options.KeyPrefix", "is not UTF-8 without NUL")
	case len(opt.KeyPrefix) >= MaxKeyBytes:
		return nil, storeerr.Option("dynamostore", "Options.KeyPrefix", "of %d bytes is too long", len(opt.KeyPrefix))
	case len(opt.SortKeyValue) > 1024:
		return nil, storeerr.Option("dynamostore", "Options.SortKeyValue", "is longer than 1024 bytes")
	case opt.TTLMargin < 0:
		return nil, storeerr.Option("dynamostore", "Options.TTLMargin", "%s is negative", opt.TTLMargin)
	case opt.SweepPageSize < 0:
		return nil, storeerr.Option("dynamostore", "Options.SweepPageSize", "%d is negative", opt.SweepPageSize)
	case opt.SweepMaxPages < 0:
		return nil, storeerr.Option("dynamostore", "Options.SweepMaxPages", "%d is negative", opt.SweepMaxPages)
	}
	names := map[string]bool{}
	for _, n := range []string{opt.PartitionKey, opt.SortKey, opt.TTLAttribute, attrFingerprint, attrState, attrToken,
		attrLeaseUntil, attrAttempts, attrResponse, attrParts, attrCreatedAt, attrCompletedAt, attrExpiresAt, attrPart,
		attrListShard, attrListCreated, attrResponseHead, attrRoute, attrStarts, attrRequest} {
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

func invalid(format string, args ...any) error {
	return storeerr.Invalid("dynamostore", format, args...)
}

func validText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// ready fails if the store is closed or ctx is done.
func (s *Store) ready(ctx context.Context) error { return storeerr.Ready(ctx, s.closed.Load()) }

// begin checks what every keyed operation checks first.
func (s *Store) begin(ctx context.Context, key string) error {
	if err := s.ready(ctx); err != nil {
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
