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
	// Reserve atomically claims key, in one store operation:
	//   - absent, or expired at now (ExpiresAt <= now) → a new claim;
	//   - in progress with LeaseUntil <= now and the same fingerprint → a takeover;
	//   - anything else → the existing record, untouched (Claimed false).
	// A claim is in progress with LeaseUntil = now+lease, ExpiresAt = now+window, and
	// Token = NextToken(previous token or 0, now). A new claim has CreatedAt = now, Attempts 1
	// and Starts 1; a takeover keeps the original CreatedAt and has Attempts previous+1 and
	// Starts previous+1. A claim of a released record (see Release) with the same fingerprint
	// is not a takeover (Attempts 1) but goes on counting: CreatedAt kept, Starts previous+1.
	// A released record with another fingerprint, or an expired one, gives a new claim.
	Reserve(ctx context.Context, key, fingerprint string, now time.Time, lease, window time.Duration) (Reservation, error)

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

// RouteReserver is implemented by stores that keep the route that claimed a record (see
// WithRoute and Record.Route). It is optional, so that a store written before routes existed
// still compiles and works: the engine then calls Reserve and its records carry no route.
//
// ReserveRoute is Reserve that also stores route, with the same decisions made by the same
// atomic store operations (never an extra write or round trip): a new claim (the key absent or
// expired) stores route; a takeover, which continues the same claim, keeps the stored route and
// stores route only if the record had none; a record that is not claimed is returned
// untouched, with its stored route. route is at most MaxRouteLen bytes of valid UTF-8 without
// NUL bytes (see CleanRoute); "" stores none, exactly as Reserve does. The engine calls
// ReserveRoute when the caller named a route with WithRoute, and Reserve otherwise.
//
// A wrapper around a store that changes Reserve (to count, to fail, to bound leases) must
// change ReserveRoute the same way: a wrapper that embeds a RouteReserver store has its
// ReserveRoute too, and the engine calls that one, not the wrapper's Reserve, whenever a route
// is named (idemhttp and idemgrpc name one for every request by default).
type RouteReserver interface {
	ReserveRoute(ctx context.Context, key, fingerprint, route string, now time.Time, lease, window time.Duration) (Reservation, error)
}

// NextToken returns the fencing token for a new claim of a key whose previous token was prev
// (0 when the key has no record). Tokens are Unix microseconds at the claim, or prev+1 when
// that is larger, so they grow with every claim of a key and a key recreated after a sweep does
// not reuse the token of an old holder. They fit exactly in a float64 (Lua, JSON numbers).
func NextToken(prev int64, now time.Time) int64 {
	return max(prev+1, now.UnixMicro())
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
