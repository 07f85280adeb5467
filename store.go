package idem

import (
	"context"
	"time"
)

// Store is the storage contract every backend implements. All methods are safe for concurrent
// use by many goroutines and, for shared backends, by many processes.
//
// Times passed in come from the engine's clock; stores compare them with the stored times and
// never consult their own clock for the contract's decisions. Stores keep times with
// microsecond precision.
//
// Every error that is not one of the contract's sentinels (ErrNotFound, ErrLeaseLost) means the
// store could not answer; the engine then fails closed.
type Store interface {
	// Reserve atomically claims req.Key, in one store operation:
	//   - absent, or expired at req.Now (ExpiresAt <= Now) → a new claim;
	//   - in progress with LeaseUntil <= Now and the same fingerprint → a takeover;
	//   - anything else → the existing record, untouched (Claimed false).
	// A claim is in progress with LeaseUntil = Now+Lease, ExpiresAt = Now+TTL, and
	// Token = storekit.NextToken(previous token or 0, Now). A new claim has CreatedAt = Now,
	// Attempts 1 and Starts 1; a takeover keeps the original CreatedAt and has Attempts
	// previous+1 and Starts previous+1. A claim of a released record (see Release) with the same
	// fingerprint is not a takeover (Attempts 1) but goes on counting: CreatedAt kept, Starts
	// previous+1. A released record with another fingerprint, or an expired one, gives a new
	// claim.
	//
	// The route is decided by the same operation (never an extra write or round trip): a new
	// claim stores req.Route; a takeover, which continues the same claim, keeps the stored route
	// and stores req.Route only if the record had none; a record that is not claimed is returned
	// untouched, with its stored route. An empty Route stores none.
	//
	// The request (req.Request) follows the route's rule: a new claim stores it, a takeover keeps
	// the stored one and stores req.Request only if the record had none, a record that is not
	// claimed is returned with its stored request. A nil Request stores none, and a record
	// without one takes no more room than before requests were kept.
	Reserve(ctx context.Context, req ReserveRequest) (Reservation, error)

	// Complete stores resp and marks the record completed, with CompletedAt = now and the given
	// expiresAt, if the record is in progress with this token; otherwise it returns
	// ErrLeaseLost and changes nothing. The store keeps its own copy of what it stores: resp's
	// body, header map and slices are the caller's again once Complete returns (callers reuse
	// their buffers).
	Complete(ctx context.Context, key string, token int64, resp Response, now, expiresAt time.Time) error

	// Release gives up the claim if the record is in progress with this token, so that the key
	// counts as absent at once (the next Reserve claims it with a larger token); otherwise it
	// returns ErrLeaseLost and changes nothing. Once released, the token is dead: Complete,
	// Release and Extend with it return ErrLeaseLost. (Stores mark a released record by
	// setting its ExpiresAt and LeaseUntil to the Unix epoch, keeping the token, or delete it.)
	Release(ctx context.Context, key string, token int64) error

	// Extend moves the lease of an in-progress, unreleased record with this token to until
	// (and its ExpiresAt to until if that is later); otherwise it returns ErrLeaseLost.
	Extend(ctx context.Context, key string, token int64, until time.Time) error

	// Get returns the stored record, expired or not (the caller compares ExpiresAt), or
	// ErrNotFound. A released record is reported as not found or as expired.
	Get(ctx context.Context, key string) (Record, error)

	// Sweep physically deletes at most batch records that expired before now and returns how
	// many it deleted. Callers loop until it returns fewer than batch.
	Sweep(ctx context.Context, now time.Time, batch int) (int, error)
}

// ReserveRequest is what Store.Reserve is asked to claim. New fields may be added; a store
// that does not know one keeps working as before.
type ReserveRequest struct {
	// Key is the scoped storage key (see CheckKey).
	Key string
	// Fingerprint identifies the request (see Fingerprint): a takeover needs the same one.
	Fingerprint string
	// Route names what claims the key, for operators (see Call.Route and Record.Route): at most
	// MaxRouteLen bytes of valid UTF-8 without NUL bytes, or "" for none. Stores clean it as
	// storekit.CleanRoute does, so a route they are given directly is kept the same way.
	Route string
	// Now is the engine's clock at the claim; stores compare it with the stored times and never
	// consult their own clock.
	Now time.Time
	// Lease is how long the claim holds: a claim's LeaseUntil is Now+Lease.
	Lease time.Duration
	// TTL is how long the record counts (Options.TTL): a claim's ExpiresAt is Now+TTL.
	TTL time.Duration
	// Request is what the client sent, redacted and bounded by the face that claims (see
	// Call.Request and Record.Request), or nil to keep none. Stores keep it as given (encoded by
	// storekit.EncodeRequest); they never keep the caller's slices or maps.
	Request *Request
}

// Deleter is implemented by stores that can delete a record outright, whatever its state. It
// is for operators (`idem release --force`), not part of the contract the engine uses: a deleted
// completed record lets its key execute again. Deleting a missing key is not an error.
type Deleter interface {
	Delete(ctx context.Context, key string) error
}

// SelfExpiring is implemented by stores whose storage deletes expired records by itself (a
// Redis key TTL, a DynamoDB TTL attribute). SelfExpiring reports whether it does, so that
// `idem serve` and other callers of store/sweeper skip a background sweep that would only
// delete records sooner. Expired records count as absent either way: this is about space,
// never about the contract.
type SelfExpiring interface {
	SelfExpiring() bool
}
