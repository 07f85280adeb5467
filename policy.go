package idem

import "errors"

// Disposition says what the engine does with the outcome of an effect.
type Disposition uint8

const (
	// DispositionKeep stores the response: every later request with the key gets it replayed.
	DispositionKeep Disposition = iota + 1
	// DispositionRelease frees the claim: nothing is known to have happened, so a retry
	// executes.
	DispositionRelease
	// DispositionUncertain leaves the claim in place, neither stored nor released: the effect
	// may have happened. What follows is the engine's UncertainPolicy (which may hold the
	// claim to the end of its window: UncertainHold).
	DispositionUncertain
)

// String returns "keep", "release", "uncertain" or "invalid".
func (d Disposition) String() string {
	switch d {
	case DispositionKeep:
		return "keep"
	case DispositionRelease:
		return "release"
	case DispositionUncertain:
		return "uncertain"
	}
	return "invalid"
}

// Policy decides, from what the effect returned, whether the response is kept, the claim
// released, or the outcome held as uncertain.
type Policy func(resp Response, err error) Disposition

// DefaultPolicy holds errors that wrap ErrUncertain and releases every other error. Responses
// with status 5xx, 401, 403, 408, 409, 425 or 429 are released: nothing is known to have
// happened, or the caller must fix something first. Every other response (including status 0,
// for non-HTTP effects) is kept.
func DefaultPolicy(resp Response, err error) Disposition {
	if err != nil {
		if errors.Is(err, ErrUncertain) {
			return DispositionUncertain
		}
		return DispositionRelease
	}
	if resp.Status >= 500 {
		return DispositionRelease
	}
	return releasedStatus(resp.Status)
}

// StoreServerErrors is DefaultPolicy, except that 5xx responses are kept and replayed, as
// Stripe does: a retry of a request that failed on the server gets the same failure.
func StoreServerErrors(resp Response, err error) Disposition {
	if err == nil && resp.Status >= 500 {
		return DispositionKeep
	}
	return DefaultPolicy(resp, err)
}

func releasedStatus(status int) Disposition {
	switch status {
	case 401, 403, 408, 409, 425, 429:
		return DispositionRelease
	}
	return DispositionKeep
}

// UncertainPolicy says what happens to a claim whose outcome is held as uncertain.
type UncertainPolicy uint8

const (
	// UncertainExpire (the default) keeps the claim until its lease runs out: retries get
	// ErrInFlight until then, and afterwards one may take over and execute again. The effect
	// runs at least once and, within the lease, at most once.
	UncertainExpire UncertainPolicy = iota
	// UncertainRelease frees the claim at once, so a retry executes again. Use it only when
	// the effect is itself safe to repeat.
	UncertainRelease
	// UncertainHold extends the lease to the end of the record's TTL, so no retry executes
	// until an operator resolves the key (idem release) or the record expires.
	UncertainHold
)

// String returns "expire", "release", "hold" or "invalid": the words UnmarshalText reads.
func (p UncertainPolicy) String() string {
	switch p {
	case UncertainExpire:
		return "expire"
	case UncertainRelease:
		return "release"
	case UncertainHold:
		return "hold"
	}
	return "invalid"
}

// MarshalText returns the policy's word, as String does; it fails for an unknown policy.
func (p UncertainPolicy) MarshalText() ([]byte, error) {
	s := p.String()
	if s == "invalid" {
		return nil, invalid("unknown uncertain policy %d", uint8(p))
	}
	return []byte(s), nil
}

// UnmarshalText reads "expire", "release" or "hold" (also "pin", the former word for hold), as
// configuration files and flags spell them. Anything else is an error wrapping ErrInvalidInput.
func (p *UncertainPolicy) UnmarshalText(b []byte) error {
	switch string(b) {
	case "expire":
		*p = UncertainExpire
	case "release":
		*p = UncertainRelease
	case "hold", "pin":
		*p = UncertainHold
	default:
		return invalid("uncertain policy %q is not expire, release or hold", b)
	}
	return nil
}
