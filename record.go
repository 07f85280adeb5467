package idem

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// ErrCorruptRecord: a stored record or response could not be decoded. It wraps ErrInvalidInput.
var ErrCorruptRecord = fmt.Errorf("%w: corrupt stored response", ErrInvalidInput)

// State is the lifecycle state of a record.
type State uint8

const (
	// StateInProgress means a holder has claimed the key and its effect has not completed.
	StateInProgress State = 1
	// StateCompleted means the effect finished and its response is stored for replay.
	StateCompleted State = 2
)

// String returns "in_progress", "completed" or "unknown(N)".
func (s State) String() string {
	switch s {
	case StateInProgress:
		return "in_progress"
	case StateCompleted:
		return "completed"
	default:
		return "unknown(" + strconv.Itoa(int(s)) + ")"
	}
}

// Response is the result of an effect, stored on completion and returned on every replay.
//
// For HTTP it is the status, the stored headers and the body bytes. Other users (message
// consumers, jobs) may leave Status zero and keep a small result in Body.
type Response struct {
	// Status is the HTTP status code, or 0 when the effect is not HTTP.
	Status int
	// Header holds the stored headers. It is assignable to and from http.Header.
	Header map[string][]string
	// Body is the response body, byte for byte.
	Body []byte
	// BodyOmitted reports that the effect completed but its body was too large to keep:
	// a replay must say so rather than return a truncated body.
	BodyOmitted bool
}

// Equal reports whether r and o are the same response: same status, same headers in the same
// order of values, same body bytes (a nil and an empty body are equal), same BodyOmitted.
func (r Response) Equal(o Response) bool {
	if r.Status != o.Status || r.BodyOmitted != o.BodyOmitted || !bytes.Equal(r.Body, o.Body) {
		return false
	}
	if len(r.Header) != len(o.Header) {
		return false
	}
	for k, v := range r.Header {
		ov, ok := o.Header[k]
		if !ok || !slices.Equal(v, ov) {
			return false
		}
	}
	return true
}

// Record is what a store keeps for one scoped key.
//
// Times are kept with microsecond precision by every store.
type Record struct {
	// Key is the scoped storage key.
	Key string
	// Fingerprint is the hex SHA-256 of what identifies the request (see Fingerprint).
	Fingerprint string
	// State is in progress or completed.
	State State
	// Token is the fencing token of the current claim. It grows with every claim of the key.
	Token int64
	// LeaseUntil is when the holder's lease runs out; after it another may take over.
	LeaseUntil time.Time
	// Attempts counts the claims of the current run of the effect: 1 for a claim, +1 for each
	// takeover. A claim after a release starts again at 1 (see Starts for the whole count).
	Attempts int
	// Starts counts how many times the effect was started under this record: 1 for the first
	// claim, +1 for each takeover and +1 for each claim with the same fingerprint after a
	// release (an attempt that failed and gave the key up, then a retry). A claim of a key whose
	// record expired, or of a released key with another fingerprint, starts again at 1. It is
	// never below Attempts; stores report Attempts for records written before they kept it.
	Starts int
	// Response is the stored response; nil unless State is StateCompleted.
	Response *Response
	// CreatedAt is when the record was first claimed: kept by takeovers and by claims with the
	// same fingerprint after a release, as long as Starts goes on counting.
	CreatedAt time.Time
	// CompletedAt is when the record completed; zero while in progress.
	CompletedAt time.Time
	// ExpiresAt is when the record's TTL runs out: from then on it counts as absent.
	ExpiresAt time.Time
	// Route names what claimed the key, for operators (such as "POST /v1/orders/{id}/pay"):
	// the route the Call named when the key was claimed (ReserveRequest.Route), at most
	// MaxRouteLen bytes of UTF-8, or "" when none was given.
	Route string
	// Request is what the client sent, as the face that claimed the key retained it
	// (ReserveRequest.Request), or nil when none was retained.
	Request *Request
}

// Expired reports whether the record counts as absent at now (a record past ExpiresAt is
// absent even if the store still holds it).
func (r *Record) Expired(now time.Time) bool { return !now.Before(r.ExpiresAt) }

// LeaseExpired reports whether an in-progress record's lease has run out at now.
func (r *Record) LeaseExpired(now time.Time) bool {
	return r.State == StateInProgress && !now.Before(r.LeaseUntil)
}

// Reservation is the result of Store.Reserve.
type Reservation struct {
	// Claimed is true when the caller now holds the claim, with Record.Token as its token.
	Claimed bool
	// Takeover is true when the claim was taken over from a holder whose lease had expired.
	Takeover bool
	// Record is the new claim when Claimed, otherwise the existing record, untouched.
	Record Record
}
