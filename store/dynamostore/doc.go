// Package dynamostore is an idem.Store on Amazon DynamoDB, for services that share their
// idempotency records across processes and regions of one account without running a database.
//
//	client := dynamodb.NewFromConfig(cfg)
//	st, err := dynamostore.New(dynamostore.Options{Client: client, Table: "idem"})
//	…
//	err = st.CreateTable(ctx, dynamostore.TableOptions{}) // once, or with your IaC
//	eng, err := idem.New(st, idem.Options{})
//
// # How a claim works
//
// Reserve is one conditional PutItem with ReturnValuesOnConditionCheckFailure=ALL_OLD. Its
// condition, attribute_not_exists(pk) OR (expires_at <= :now AND token < :token), claims an
// absent, expired or released key atomically with the fencing token storekit.NextToken requires
// (the claim's Unix microseconds). When the condition fails, DynamoDB returns the existing
// item in the same answer, so a duplicate, a replay, an in-flight or a mismatching request
// costs that one call and writes nothing. Two rarer cases take a second conditional write,
// decided from the returned item and conditioned on its token so no other writer can slip in
// between: the takeover of a stale lease (the new item carries Attempts+1 and the original
// CreatedAt, which one PutItem cannot compute) and an expired record whose token is not below
// now (same microsecond, fake clocks), reclaimed with token prev+1.
//
// Complete, Release and Extend are UpdateItems conditioned on token = :token AND state =
// in_progress AND expires_at <> 0 (Release marks a record by setting expires_at and
// lease_until to 0, like memstore, keeping the token so the next claim's is larger). A failed
// condition is idem.ErrLeaseLost. Extend within the TTL is one UpdateItem; past it, a
// second one moves expires_at and the TTL too.
//
// # Calls and cost
//
// Requests per operation, asserted by TestCallsPerOperation, and DynamoDB capacity (a write
// unit per 1 KB of the larger of the item before and after, also when a condition fails; a
// strongly consistent read unit per 4 KB; transactions count twice; the item returned by
// ALL_OLD costs no read units):
//
//	operation                      requests                         write / read units
//	new key (claim)                1 PutItem                        1 WCU (item ≈ key + 200 B)
//	complete, response ≤ 384 KiB   1 UpdateItem                     ⌈record size / 1 KB⌉ WCU
//	replay / duplicate / in flight 1 PutItem (condition fails)      ⌈stored record size / 1 KB⌉ WCU
//	heartbeat (Extend)             1 UpdateItem                     1 WCU
//	release                        1 UpdateItem                     1 WCU
//	takeover of a stale lease      2 PutItem                        2 WCU
//	Get                            1 GetItem (strongly consistent)  ⌈record size / 4 KB⌉ RCU
//	complete, larger response      1 TransactWriteItems             2 × ⌈size / 1 KB⌉ WCU
//	replay, larger response        1 PutItem + 1 BatchGetItem       as above + parts' RCU
//
// A message consumed once with a small result therefore costs 2 write units (claim and
// completion); each redelivery 1 more. Note that a replay is billed as a write of the stored
// record's size: for large stored responses that are replayed often, a GetItem would be
// cheaper per replay (half a read unit per 4 KB, eventually consistent) but would cost every
// new key a second round trip; this store optimises for one round trip.
//
// # Table layout
//
// One item per record, keyed by the partition key (Options.PartitionKey, default "pk") holding
// Options.KeyPrefix + key, and, for a single-table design, an optional sort key holding a fixed
// value (Options.SortKey, Options.SortKeyValue). Attributes: fingerprint (S), state (S:
// in_progress or completed), token (N), lease_until, created_at, completed_at, expires_at (N,
// Unix microseconds), attempts (N), response (B, storekit.EncodeResponse) and the TTL attribute
// (N, Unix seconds, Options.TTLMargin beyond expires_at), and for the listing indexes list_shard
// (N), list_created (S: created_at in 16 zero-padded digits, then the key) and, once completed, response_head (B, the first bytes of the response). Keys pass idem.CheckKey (UTF-8
// without NUL, at most idem.MaxStorageKeyLen bytes) and are at most MaxKeyBytes with the prefix.
//
// A response whose encoding exceeds PartSize (384 KiB; DynamoDB items hold 400 KiB) is split:
// the record keeps the first part and the number of parts, and part items under the key
// "prefix+key\x00N" hold the rest with the claim's token. Completion writes the record and
// its parts in one transaction, so a reader never sees half of it; a replay checks that every
// part carries the record's token. Responses above MaxResponseBytes (3.75 MiB) are refused
// with idem.ErrInvalidInput; keep HTTP body limits below.
//
// # Listing
//
// The store implements idem.Lister (idem list) with Queries on the table's listing index,
// ListIndex, never a Scan: a global secondary index, projecting keys only, whose partition key
// is list_shard, a Number each record carries (one of ListShards groups, a hash of its key,
// so the index's writes spread over several partition keys), and whose sort key is the table's
// partition key. A page merges the key ranges of the ListShards partitions (one Query each, in
// parallel) and reads the candidates' attributes, never their responses, with strongly
// consistent BatchGetItems: a completed record keeps the first bytes of its response in
// response_head (B) for this. The index costs one index write when a record is created and one
// when it is deleted (its keys never change; updates of other attributes do not touch a
// keys-only index), and its storage, about the key's length plus 100 bytes per record.
// The index is eventually consistent, so a record claimed a moment ago may be missing from a
// page; what a page shows of each record is read from the table itself.
//
// Newest first (idem.ListNewestFirst) reads a second such index, NewestIndex, whose sort key
// is list_created: each record's creation time (16 zero-padded decimal digits of Unix
// microseconds) then its key, so each partition reads newest first (ScanIndexForward false)
// and a time range or a cursor is a range of it. Its partition key is list_shard too, not one
// constant: a single partition key would take every new record's index write, and a throttled
// index throttles the table's writes with it; spread over ListShards keys it takes no more
// than the table's own writes do, and a page merges ListShards Queries. A cursor is a
// (creation time, key) position, so records claimed while an operator pages go before the
// first page and never shift the later ones. It costs one index write per new record (and per
// record claimed anew after it expired, whose list_created changes) and about as much storage
// as ListIndex.
//
// CreateTable creates the indexes with the table, and adds each to an existing table that
// lacks it (UpdateTable; DynamoDB builds it in the background and CreateTable waits for it).
// When it adds NewestIndex, it gives the records already in the table their list_created,
// and their list_shard if they have none, with one Scan and an UpdateItem per record (a
// one-time cost, billed by the table's size), so records written by earlier versions of the
// store are listed in both orders. Records written by such versions while they still run
// carry neither: they appear in key order once a Complete or a new claim rewrites them, and
// newest first once a new claim does.
//
// # Expiry, TTL and Sweep
//
// A record past expires_at counts as absent whatever DynamoDB still holds: the
// conditions compare expires_at with the engine's clock. DynamoDB's TTL deletes old items in
// the background, for free, usually within days; CreateTable enables it. Sweep exists for
// completeness (idem sweep) and where TTL is off: it pages through a Scan filtered on
// expires_at and deletes each candidate with a DeleteItem conditioned on expires_at, bounded
// by SweepMaxPages pages per call. A Scan is billed for every item it reads, expired or not.
//
// # Errors
//
// ErrLeaseLost and ErrNotFound as the contract says; bad keys and options wrap
// idem.ErrInvalidInput; every DynamoDB failure is an *idem.StoreError that matches
// idem.ErrStoreUnavailable and unwraps to the SDK's error (for instance a
// *types.ProvisionedThroughputExceededException once the SDK's retryer, 4 attempts with jittered
// backoff for DynamoDB clients, gives up), so the engine fails closed. A closed Store returns
// idem.ErrClosed.
//
// # DynamoDB Local
//
// Tests run against AWS's DynamoDB Local (scripts/services.d/30-dynamodb.sh starts it on
// 127.0.0.1:8000; IDEM_DYNAMODB_ENDPOINT overrides). LocalClient builds a client for it.
package dynamostore
