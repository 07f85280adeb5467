// Package storekit holds what an author of an idem.Store needs and a user of idem does not: the
// response encoding every backend stores, the fencing token rule, the cleaning of a route, and
// the arithmetic of a listing (its checked bounds, its cursor, and the completion of a record
// read from a list).
//
// The name says what it is: a kit to build a store with, next to store/storetest, the suite a
// store must pass. It is kept apart from package idem, as database/sql keeps database/sql/driver
// apart, so that the root package lists only what a caller of the engine uses. It imports idem
// (for Record, Response, State and the errors); idem never imports it.
//
// # Encoding
//
// Stores that keep a response as one blob use EncodeResponse (or AppendResponse) and
// DecodeResponse, so every backend stores the same bytes and later releases still read
// records written by earlier ones. A listing reads only the first ListResponseHeadLen bytes of
// a stored response and decodes them with DecodeResponseHead.
//
// # Claims
//
// A claim's fencing token is NextToken(previous token, now); its route is CleanRoute(route).
//
// # Listing
//
// A store's List checks its query with Bounds and reads the keys the bounds give, in key
// order, at most Limit+1 of them; ListBounds.Page cuts the page and makes its cursor. SQL
// stores that read a record's columns complete it with FillListed.
package storekit
