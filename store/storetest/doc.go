// Package storetest is the conformance suite for idem.Store implementations.
//
// Every backend passes it unchanged: its test is a constructor and a call.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) idem.Store { return newIsolatedStore(t) })
//	}
//
// The constructor is called once per subtest and must return a store that shares nothing with
// the others (its own table, schema or key prefix), so subtests run in parallel. It registers
// its own cleanup with t.Cleanup.
//
// # What it checks
//
// Concurrent claims of one key (exactly one wins, repeated), takeover only after the lease ran
// out and only with the same fingerprint, fencing of Complete, Release and Extend, expired
// records counting as absent, Sweep deleting only expired records in bounded batches (never a
// claim inside its TTL, whether its lease is held or ran out), exact round trips of empty,
// binary and large bodies, long and unicode keys and multi-valued headers, the keys
// idem.CheckKey refuses refused with idem.ErrInvalidInput, cancelled contexts, Complete racing a
// takeover, Attempts and CreatedAt carried across releases and takeovers (not replays), every
// method of a closed store returning idem.ErrClosed, the route a claim stores
// (idem.ReserveRequest.Route: kept by a takeover, replaced by a new claim, listed), the request
// a claim retains (idem.ReserveRequest.Request: kept by the same rule, in the store's own copy),
// and a porcupine check that concurrent histories of all operations are linearizable with respect to
// the contract (see CheckLinearizable).
//
// A store that implements idem.Lister is checked in both orders: in key order, and newest
// first (idem.ListNewestFirst), which every lister must serve, since an operator's console
// opens on the newest records; a store without a Lister skips the listing tests.
package storetest
