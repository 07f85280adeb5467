package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/store/storekit"
)

// Reserve implements idem.Store.
//
// Calls (each one DynamoDB request, retried by the SDK's retryer on throttling):
//   - absent key, or a record that expired (or was released) with a token below now in Unix
//     microseconds: one conditional PutItem that claims it (claimFresh);
//   - a live record (a duplicate, a replay, an in-flight or mismatching request): the same
//     one PutItem, whose failed condition returns the record (ALL_OLD); nothing is written;
//   - a takeover of a stale lease: that PutItem, then a second PutItem conditioned on the old
//     token (claimTakeover), which carries Attempts+1 and the original CreatedAt;
//   - an expired record whose token is not below now (same microsecond, or a clock behind
//     the one that claimed it): that PutItem, then a second one with token prev+1
//     conditioned on the old token (claimExpired);
//   - a completed record whose response spans parts: plus one BatchGetItem for the parts.
//
// A second write that loses to a concurrent writer re-evaluates the record it returns, a
// bounded number of times.
//
// The claiming PutItem writes the route and the request too (a takeover's, those of the record
// it takes over unless it has none).
func (s *Store) Reserve(ctx context.Context, req idem.ReserveRequest) (idem.Reservation, error) {
	key, fingerprint := req.Key, req.Fingerprint
	if err := s.begin(ctx, key); err != nil {
		return idem.Reservation{}, err
	}
	if !validText(fingerprint) {
		return idem.Reservation{}, invalid("fingerprint is not UTF-8 without NUL")
	}
	now := req.Now.Truncate(time.Microsecond)
	nowM := micros(now)
	leaseUntil := micros(now.Add(req.Lease))
	expires := micros(now.Add(req.TTL))

	// First try: a fresh claim of an absent or expired key, token = now in microseconds.
	route := storekit.CleanRoute(req.Route)
	request := req.Request.Clone() // the store's own copy: the caller may reuse its buffers
	claim := idem.Record{Key: key, Fingerprint: fingerprint, State: idem.StateInProgress, Token: nowM, Attempts: 1,
		Starts: 1, CreatedAt: now, LeaseUntil: time.UnixMicro(leaseUntil), ExpiresAt: time.UnixMicro(expires), Route: route, Request: request}
	fresh := func() {
		claim.Token, claim.Attempts, claim.Starts, claim.CreatedAt, claim.Route, claim.Request = nowM, 1, 1, now, route, request
	}
	cond := claimFresh
	var prev int64
	for range maxTries {
		item := s.itemKey(key, 0)
		item[attrFingerprint] = str(fingerprint)
		item[attrState] = str(stateInProgress)
		item[attrToken] = num(claim.Token)
		item[attrLeaseUntil] = num(leaseUntil)
		item[attrAttempts] = num(int64(claim.Attempts))
		item[attrStarts] = num(int64(claim.Starts))
		item[attrCreatedAt] = num(micros(claim.CreatedAt))
		item[attrExpiresAt] = num(expires)
		item[s.opt.TTLAttribute] = num(s.ttl(expires))
		item[attrListShard] = num(listShard(key))
		item[attrListCreated] = str(listCreated(micros(claim.CreatedAt), key))
		if claim.Route != "" {
			item[attrRoute] = str(claim.Route)
		}
		if claim.Request != nil {
			item[attrRequest] = bin(storekit.EncodeRequest(*claim.Request))
		}
		_, err := s.api.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           &s.opt.Table,
			Item:                                item,
			ConditionExpression:                 &cond.expr,
			ExpressionAttributeNames:            s.names(cond.names...),
			ExpressionAttributeValues:           cond.values(nowM, claim.Token, prev, fingerprint),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return idem.Reservation{Claimed: true, Takeover: cond.takeover, Record: claim}, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if !errors.As(err, &ccf) {
			return idem.Reservation{}, wrap("reserve", err)
		}
		if ccf.Item == nil {
			// The record vanished between the condition and its report (a sweep or TTL
			// deletion): start again with a fresh claim.
			cond = claimFresh
			fresh()
			continue
		}
		old, parts, err := s.decode(key, ccf.Item)
		if err != nil {
			return idem.Reservation{}, wrap("reserve", err)
		}
		prev = old.Token
		claim.Token = storekit.NextToken(prev, now)
		switch {
		case old.Expired(now):
			// Expired or released, but its token is not below now: claim with prev+1. A
			// released record retried with the same fingerprint goes on counting starts.
			cond = claimExpired
			claim.Attempts, claim.Starts, claim.CreatedAt, claim.Route, claim.Request = 1, 1, now, route, request
			if old.ExpiresAt.UnixMicro() == 0 && old.Fingerprint == fingerprint {
				claim.Starts, claim.CreatedAt = old.Starts+1, old.CreatedAt
			}
		case old.LeaseExpired(now) && old.Fingerprint == fingerprint:
			cond = claimTakeover
			claim.Attempts, claim.Starts, claim.CreatedAt, claim.Route = old.Attempts+1, old.Starts+1, old.CreatedAt, cmp.Or(old.Route, route)
			claim.Request = cmp.Or(old.Request, request)
		default:
			if parts > 1 {
				ok, err := s.loadParts(ctx, key, &old, parts)
				if err != nil {
					return idem.Reservation{}, wrap("reserve", err)
				}
				if !ok { // replaced while we read it: look again
					cond = claimFresh
					fresh()
					continue
				}
			}
			return idem.Reservation{Record: old}, nil
		}
	}
	return idem.Reservation{}, wrap("reserve", fmt.Errorf("key %q changed under %d consecutive conditional writes", key, maxTries))
}

// claimCond is the condition of one kind of claiming PutItem. Each re-checks, at the write,
// everything Reserve decided on when it read the record, so a record that changed in between
// fails the write instead of being overwritten.
type claimCond struct {
	expr     string
	names    []string // the attribute name placeholders expr uses
	vals     []string // the value placeholders expr uses
	takeover bool     // a claim under it is a takeover
}

var (
	// claimFresh claims an absent key, or an expired or released record whose token is below
	// the new one (the new token is now in Unix microseconds). A record released with the
	// same fingerprint is left to claimExpired, which has read it and goes on counting its
	// starts: a retry after a failed attempt costs a second write.
	claimFresh = claimCond{
		expr:  "attribute_not_exists(#pk) OR (#exp <= :now AND #tok < :tok AND NOT (#exp = :zero AND #fp = :fp))",
		names: []string{"#pk", "#exp", "#tok", "#fp"},
		vals:  []string{":now", ":tok", ":zero", ":fp"},
	}
	// claimExpired claims an expired or released record whose token is not below now: it is
	// conditioned on that very token (the new one is prev+1) and on the record still being
	// expired.
	claimExpired = claimCond{
		expr:  "#tok = :prev AND #exp <= :now",
		names: []string{"#tok", "#exp"},
		vals:  []string{":prev", ":now"},
	}
	// claimTakeover takes over a stale claim: the same token, still in progress, still within
	// its TTL, its lease still run out (the holder did not extend it in between) and the
	// same fingerprint.
	claimTakeover = claimCond{
		expr:     "#tok = :prev AND #st = :ip AND #lease <= :now AND #exp > :now AND #fp = :fp",
		names:    []string{"#tok", "#st", "#lease", "#exp", "#fp"},
		vals:     []string{":prev", ":ip", ":now", ":fp"},
		takeover: true,
	}
)

// values returns the expression attribute values c uses.
func (c claimCond) values(now, token, prev int64, fingerprint string) map[string]types.AttributeValue {
	m := make(map[string]types.AttributeValue, len(c.vals))
	for _, v := range c.vals {
		switch v {
		case ":now":
			m[v] = num(now)
		case ":tok":
			m[v] = num(token)
		case ":prev":
			m[v] = num(prev)
		case ":fp":
			m[v] = str(fingerprint)
		case ":zero":
			m[v] = num(0)
		case ":ip":
			m[v] = str(stateInProgress)
		}
	}
	return m
}
