package idemgrpc

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// MetadataKey is the request metadata that carries the idempotency key: idem.KeyHeader in
// lower case, as gRPC metadata spells header names.
const MetadataKey = "idempotency-key"

// ReplayedKey is the response header metadata set to "true" on every replayed reply: the
// Idempotent-Replayed HTTP header in lower case.
const ReplayedKey = "idempotent-replayed"

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail on every error the server
// interceptor answers itself.
const ErrorDomain = "idem"

// Reasons, in the google.rpc.ErrorInfo detail of the errors the server interceptor answers
// itself, so a client can tell them apart without parsing messages.
const (
	ReasonMissingKey       = "IDEMPOTENCY_KEY_MISSING"    // InvalidArgument
	ReasonInvalidKey       = "IDEMPOTENCY_KEY_INVALID"    // InvalidArgument
	ReasonInvalidScope     = "IDEMPOTENCY_SCOPE_INVALID"  // InvalidArgument
	ReasonKeyReused        = "IDEMPOTENCY_KEY_REUSED"     // FailedPrecondition
	ReasonInFlight         = "IDEMPOTENCY_KEY_IN_FLIGHT"  // Aborted, with RetryInfo
	ReasonStoreUnavailable = "IDEMPOTENCY_STORE_DOWN"     // Unavailable, with RetryInfo
	ReasonNotReplayable    = "IDEMPOTENCY_NOT_REPLAYABLE" // Internal
	ReasonNotRetained      = "IDEMPOTENCY_NOT_RETAINED"   // AlreadyExists
)

// DefaultMaxReplyBytes is the default ServerOptions.MaxReplyBytes: 1 MiB, as idemhttp keeps.
const DefaultMaxReplyBytes = 1 << 20

// ScopeFunc returns the tenant a call acts for, from its context (incoming metadata, the peer's
// verified identity, what an authentication interceptor stored). It prefixes the storage key,
// so two tenants' calls with the same key never see or block each other. It must return the
// same scope for every retry of a call: use the account, not a credential that rotates.
type ScopeFunc func(ctx context.Context) (string, error)

// SingleCaller is the ServerOptions.Scope of a service that one trusted caller is the only one
// to use: every call is in the one scope "", so keys are global, and any caller who sends
// another's key and request receives the other's stored reply. Choose it explicitly; with more
// than one caller, scope by the caller's identity instead (KeyedMetadataScope, or a ScopeFunc
// of your own that returns the account an authentication interceptor resolved).
func SingleCaller() ScopeFunc { return singleCaller }

func singleCaller(context.Context) (string, error) { return "", nil }

// MetadataScope scopes calls by the values of the named incoming metadata (such as
// "x-api-key"), hashed with SHA-256 so that the credential itself reaches neither the store nor
// the logs: the scope is the 64 hex digits of the hash of every value, each preceded by its
// length, so that no two lists of values share a scope. A call without it is anonymous (scope
// "").
//
// An unkeyed hash of a guessable credential can be reversed by trying guesses: prefer
// KeyedMetadataScope, whose hash needs a secret kept apart from the store.
func MetadataScope(name string) ScopeFunc {
	name = strings.ToLower(name)
	return func(ctx context.Context) (string, error) {
		vs := metadata.ValueFromIncomingContext(ctx, name)
		if len(vs) == 0 {
			return "", nil
		}
		return hashValues(sha256.New(), vs), nil
	}
}

// KeyedMetadataScope is MetadataScope with the values hashed by HMAC-SHA256 under secret:
// without the secret, stored and logged scopes cannot be tested against guesses of the
// credential. Every process that shares a store must use the same secret; a new secret makes
// every scope new, so records made under the old one are not found again. It panics if secret
// is empty.
func KeyedMetadataScope(name string, secret []byte) ScopeFunc {
	if len(secret) == 0 {
		panic("idemgrpc: KeyedMetadataScope with an empty secret")
	}
	name = strings.ToLower(name)
	secret = bytes.Clone(secret)
	return func(ctx context.Context) (string, error) {
		vs := metadata.ValueFromIncomingContext(ctx, name)
		if len(vs) == 0 {
			return "", nil
		}
		return hashValues(hmac.New(sha256.New, secret), vs), nil
	}
}

// hashValues returns the hex digest of h over every value, each preceded by its length as 8
// bytes big-endian: a list of values is one string only one way.
func hashValues(h hash.Hash, vs []string) string {
	var n [8]byte
	for _, v := range vs {
		binary.BigEndian.PutUint64(n[:], uint64(len(v)))
		h.Write(n[:])
		_, _ = io.WriteString(h, v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ServerOptions configure the server interceptor. Runner and Scope are required.
type ServerOptions struct {
	// Runner runs handlers at most once per key and stores their replies: an *idem.Engine, or
	// a transactional runner (pgstore.TxRunner, …) that runs each handler in the same database
	// transaction as the claim and the stored reply. Its Policy decides which replies are
	// kept, seen through HTTPStatus (see the package documentation); its Wait, whether a
	// duplicate in flight waits for the reply or gets Aborted at once. Required.
	Runner idem.Runner
	// Methods are the full method names processed ("/pkg.Service/Method"); calls to other
	// methods pass through untouched. Default: every unary method.
	Methods []string
	// RequireKey answers InvalidArgument to a processed call without a key. Default false:
	// such a call passes through without protection.
	RequireKey bool
	// Scope gives the tenant a call acts for (see ScopeFunc). Required: without a scope, one
	// caller who sends another's key and request receives the other's stored reply. Use a
	// ScopeFunc that returns the caller's stable identity (the account an authentication
	// interceptor resolved, or KeyedMetadataScope over an API key), or SingleCaller when one
	// trusted caller is the only one to use the service.
	Scope ScopeFunc
	// Types resolves the stored reply's message type on a replay, by the full name recorded
	// with it. Default protoregistry.GlobalTypes, where every generated message type
	// registers itself.
	Types protoregistry.MessageTypeResolver
	// MaxReplyBytes is the largest reply kept for replay, in bytes of the stored status and
	// message. A larger reply goes to the caller as usual and the record is completed without
	// it: a retry gets AlreadyExists (ReasonNotRetained), never a second run of the handler.
	// Default DefaultMaxReplyBytes (1 MiB); stores have item limits (DynamoDB: 400 KB).
	MaxReplyBytes int
	// StoreRetryAfter is the retry delay sent (as RetryInfo) with Unavailable when the store
	// fails. Default 1s.
	StoreRetryAfter time.Duration
	// Logger receives warnings: replies that could not be stored, replies that could not be
	// replayed. Default slog.Default().
	Logger *slog.Logger
	// OnEvent, if set, is called once per call, before the interceptor returns, with what
	// happened to it (for metrics and logs). It must be quick and safe for concurrent use. A
	// call whose handler panics reports nothing: the panic goes on. Spans come from the
	// runner's idem.Options.Observer (see idemotel.Observer). Default nil.
	OnEvent func(Event)
}

// optionError reports an invalid option as an *idem.OptionError raised by idemgrpc.
func optionError(field, format string, args ...any) error {
	return &idem.OptionError{Package: "idemgrpc", Field: field, Problem: fmt.Sprintf(format, args...)}
}

type server struct {
	opt     ServerOptions
	methods map[string]bool
	storeRA *durationpb.Duration
}

// UnaryServerInterceptor returns the server interceptor. It fails with an *idem.OptionError
// (matching idem.ErrInvalidInput) naming the field if an option is invalid. See the package documentation for
// what it answers.
func UnaryServerInterceptor(opt ServerOptions) (grpc.UnaryServerInterceptor, error) {
	if opt.Runner == nil || opt.Runner == (*idem.Engine)(nil) {
		return nil, optionError("ServerOptions.Runner", "is required")
	}
	if opt.Scope == nil {
		return nil, optionError("ServerOptions.Scope", "is required: a ScopeFunc that tells callers apart "+
			"(KeyedMetadataScope over an API key, or the account your authentication resolved), "+
			"or SingleCaller() when one trusted caller is the only one to use the service")
	}
	if opt.StoreRetryAfter < 0 {
		return nil, optionError("ServerOptions.StoreRetryAfter", "%s is negative", opt.StoreRetryAfter)
	}
	if opt.MaxReplyBytes < 0 {
		return nil, optionError("ServerOptions.MaxReplyBytes", "%d is negative", opt.MaxReplyBytes)
	}
	opt.MaxReplyBytes = cmp.Or(opt.MaxReplyBytes, DefaultMaxReplyBytes)
	opt.StoreRetryAfter = cmp.Or(opt.StoreRetryAfter, time.Second)
	if opt.Types == nil {
		opt.Types = protoregistry.GlobalTypes
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	s := &server{opt: opt, storeRA: durationpb.New(opt.StoreRetryAfter)}
	if opt.Methods != nil {
		s.methods = make(map[string]bool, len(opt.Methods))
		for _, m := range opt.Methods {
			if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 {
				return nil, optionError("ServerOptions.Methods", "%q is not a full method name (/package.Service/Method)", m)
			}
			s.methods[m] = true
		}
	}
	return s.intercept, nil
}

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if s.opt.OnEvent == nil {
		reply, _, err := s.serve(ctx, req, info, handler)
		return reply, err
	}
	start := time.Now()
	reply, ev, err := s.serve(ctx, req, info, handler)
	ev.Method, ev.Code, ev.Start, ev.Duration = info.FullMethod, status.Code(err), start, time.Since(start)
	s.opt.OnEvent(ev)
	return reply, err
}

// serve handles a call and says what it did in an Event (Outcome, Key, Takeover, Err).
func (s *server) serve(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, Event, error) {
	if s.methods != nil && !s.methods[info.FullMethod] {
		reply, err := handler(ctx, req)
		return reply, Event{Outcome: OutcomeBypass}, err
	}
	key, err := keyFrom(ctx)
	if err != nil {
		return nil, Event{Outcome: OutcomeInvalidKey}, fail(codes.InvalidArgument, ReasonInvalidKey, err.Error())
	}
	if key == "" {
		if s.opt.RequireKey {
			return nil, Event{Outcome: OutcomeMissingKey}, fail(codes.InvalidArgument, ReasonMissingKey, "idempotency-key metadata is required")
		}
		reply, err := handler(ctx, req)
		return reply, Event{Outcome: OutcomeBypass}, err
	}
	ev := Event{Key: key}
	scope := ""
	if s.opt.Scope != nil {
		scope, err = s.opt.Scope(ctx)
		if err == nil {
			err = idem.CheckScope(scope)
		}
		if err != nil {
			ev.Outcome = OutcomeInvalidScope
			return nil, ev, fail(codes.InvalidArgument, ReasonInvalidScope, "invalid scope: "+err.Error())
		}
	}
	msg, ok := req.(proto.Message)
	if !ok {
		ev.Outcome = OutcomeError
		return nil, ev, status.Errorf(codes.Internal, "idemgrpc: request of type %T is not a protocol buffer message", req)
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		ev.Outcome, ev.Err = OutcomeError, err
		return nil, ev, status.Errorf(codes.Internal, "idemgrpc: marshalling the request: %v", err)
	}
	fp := idem.Fingerprint([]byte(info.FullMethod), body)
	// The record names the method it was claimed for, for operators (idem list, the console).
	call := idem.Call{Key: idem.ScopedKey(scope, key), Fingerprint: fp, Route: info.FullMethod}

	var (
		reply    any
		replyErr error
	)
	res, err := s.opt.Runner.Run(ctx, call, func(ctx context.Context) (idem.Response, error) {
		cs := &captureStream{ServerTransportStream: grpc.ServerTransportStreamFromContext(ctx)}
		if cs.ServerTransportStream != nil {
			ctx = grpc.NewContextWithServerTransportStream(ctx, cs)
		}
		reply, replyErr = handler(ctx, req)
		return outcome(reply, replyErr, cs, s.opt.MaxReplyBytes)
	})
	ev.Takeover = res.Takeover
	if res.Executed {
		// The handler ran in this call: its own answer is the truth, whatever the store did.
		switch {
		case errors.Is(err, idem.ErrUncertain):
			ev.Outcome = OutcomeUncertain
		case !res.Kept:
			ev.Outcome = OutcomeReleased
		case res.Response.BodyOmitted:
			ev.Outcome = OutcomeOversize
		default:
			ev.Outcome = OutcomeExecuted
		}
		if err != nil && !errors.Is(err, idem.ErrUncertain) && !errors.Is(err, replyErr) {
			ev.Err = err
			s.opt.Logger.Warn("idemgrpc: handler ran but its reply could not be stored",
				"method", info.FullMethod, "err", err)
		}
		return reply, ev, replyErr
	}
	if err != nil {
		ev.Outcome, ev.Err = engineOutcome(ctx, err), err
		return nil, ev, s.engineError(ctx, err)
	}
	reply, err = s.replay(ctx, info.FullMethod, res.Response)
	if ev.Outcome = OutcomeReplay; err != nil && !res.Response.BodyOmitted {
		ev.Outcome, ev.Err = OutcomeError, err
	}
	return reply, ev, err
}

// engineOutcome is the Outcome of a call the engine refused before the handler ran, as
// engineError answers it.
func engineOutcome(ctx context.Context, err error) Outcome {
	var inflight *idem.InFlightError
	switch {
	case errors.As(err, &inflight):
		return OutcomeInFlight
	case errors.Is(err, idem.ErrMismatch):
		return OutcomeMismatch
	case errors.Is(err, idem.ErrStoreUnavailable):
		return OutcomeStoreError
	case errors.Is(err, idem.ErrInvalidInput):
		return OutcomeInvalidKey
	}
	return OutcomeError
}

// keyFrom returns the idempotency key of the call, "" if there is none.
func keyFrom(ctx context.Context) (string, error) {
	vs := metadata.ValueFromIncomingContext(ctx, MetadataKey)
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", errors.New("idempotency-key sent more than once")
	}
	k := vs[0]
	if k == "" || len(k) > idem.MaxClientKeyLen {
		return "", fmt.Errorf("idempotency-key must be 1 to %d printable ASCII characters", idem.MaxClientKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return "", fmt.Errorf("idempotency-key must be 1 to %d printable ASCII characters", idem.MaxClientKeyLen)
		}
	}
	return k, nil
}

// outcome turns what the handler returned into what the engine decides on: a canceled or
// deadline-exceeded handler is uncertain (it may have acted before it gave up), any other
// answer is a Response whose Status is its code's HTTPStatus, for the engine's Policy.
func outcome(reply any, err error, cs *captureStream, maxBytes int) (idem.Response, error) {
	var st *status.Status
	if err != nil {
		var ok bool
		if st, ok = status.FromError(err); !ok {
			st = status.FromContextError(err) // as the server itself converts it
		}
		if c := st.Code(); c == codes.Canceled || c == codes.DeadlineExceeded {
			return idem.Response{}, idem.Uncertain(err)
		}
	}
	sp := st.Proto() // nil for OK
	if err == nil {
		m, ok := reply.(proto.Message)
		if !ok || m == nil {
			return idem.Response{}, fmt.Errorf("idemgrpc: reply of type %T is not a protocol buffer message", reply)
		}
		a, err := anypb.New(m)
		if err != nil {
			return idem.Response{}, fmt.Errorf("idemgrpc: marshalling the reply: %w", err)
		}
		sp = &spb.Status{Details: []*anypb.Any{a}}
	}
	code := HTTPStatus(codes.Code(sp.GetCode()))
	body, merr := proto.Marshal(sp)
	if merr != nil {
		return idem.Response{}, fmt.Errorf("idemgrpc: marshalling the status: %w", merr)
	}
	if len(body) > maxBytes {
		return idem.Response{Status: code, BodyOmitted: true}, nil
	}
	return idem.Response{Status: code, Header: cs.stored(), Body: body}, nil
}

// replay answers a call from a stored reply.
func (s *server) replay(ctx context.Context, method string, r idem.Response) (any, error) {
	if r.BodyOmitted {
		_ = grpc.SetHeader(ctx, metadata.MD{ReplayedKey: []string{"true"}})
		return nil, fail(codes.AlreadyExists, ReasonNotRetained,
			"a call with this idempotency key was already processed; its reply was too large to be retained")
	}
	var sp spb.Status
	if err := proto.Unmarshal(r.Body, &sp); err != nil {
		s.opt.Logger.Warn("idemgrpc: stored reply does not decode", "method", method, "err", err)
		return nil, fail(codes.Internal, ReasonNotReplayable, "the stored reply to this idempotency key does not decode")
	}
	header := metadata.MD{ReplayedKey: []string{"true"}}
	var trailer metadata.MD
	for k, vs := range r.Header {
		if t, ok := strings.CutPrefix(k, trailerPrefix); ok {
			if trailer == nil {
				trailer = metadata.MD{}
			}
			trailer[t] = vs
		} else if k != ReplayedKey {
			header[k] = vs
		}
	}
	// Errors here mean the transport stream is gone (the client left): nothing to tell it.
	_ = grpc.SetHeader(ctx, header)
	if trailer != nil {
		_ = grpc.SetTrailer(ctx, trailer)
	}
	if sp.GetCode() != int32(codes.OK) {
		return nil, status.ErrorProto(&sp)
	}
	if len(sp.Details) != 1 {
		return nil, fail(codes.Internal, ReasonNotReplayable, "the stored reply to this idempotency key has no message")
	}
	a := sp.Details[0]
	mt, err := s.opt.Types.FindMessageByURL(a.GetTypeUrl())
	var m proto.Message
	if err == nil {
		m = mt.New().Interface()
		err = proto.Unmarshal(a.GetValue(), m)
	}
	if err != nil {
		s.opt.Logger.Warn("idemgrpc: stored reply cannot be rebuilt", "method", method, "type", sp.Details[0].GetTypeUrl(), "err", err)
		return nil, fail(codes.Internal, ReasonNotReplayable, "the stored reply to this idempotency key is of an unknown type")
	}
	return m, nil
}

// engineError answers an engine error that came before the handler ran.
func (s *server) engineError(ctx context.Context, err error) error {
	var inflight *idem.InFlightError
	switch {
	case errors.As(err, &inflight):
		return fail(codes.Aborted, ReasonInFlight, "a call with this idempotency key is in progress; retry later",
			&errdetails.RetryInfo{RetryDelay: durationpb.New(inflight.RetryAfter)})
	case errors.Is(err, idem.ErrMismatch):
		return fail(codes.FailedPrecondition, ReasonKeyReused,
			"this idempotency key was used with a different request")
	case errors.Is(err, idem.ErrStoreUnavailable):
		s.opt.Logger.Warn("idemgrpc: store unavailable; call refused", "err", err)
		return fail(codes.Unavailable, ReasonStoreUnavailable, "the idempotency store is unavailable; retry later",
			&errdetails.RetryInfo{RetryDelay: s.storeRA})
	case errors.Is(err, idem.ErrInvalidInput):
		return fail(codes.InvalidArgument, ReasonInvalidKey, err.Error())
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// fail builds an error status with an ErrorInfo detail and any others.
func fail(c codes.Code, reason, msg string, more ...proto.Message) error {
	sp := &spb.Status{Code: int32(c), Message: msg}
	for _, d := range append([]proto.Message{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}}, more...) {
		if a, err := anypb.New(d); err == nil {
			sp.Details = append(sp.Details, a)
		}
	}
	return status.ErrorProto(sp)
}

// HTTPStatus returns the HTTP status that corresponds to a gRPC code, as google.rpc.Code
// documents it (and Canceled as 499). The server interceptor records a reply with it, so the
// engine's Policy, written for HTTP, decides which replies are kept.
func HTTPStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return 200
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return 400
	case codes.Unauthenticated:
		return 401
	case codes.PermissionDenied:
		return 403
	case codes.NotFound:
		return 404
	case codes.Aborted, codes.AlreadyExists:
		return 409
	case codes.ResourceExhausted:
		return 429
	case codes.Unimplemented:
		return 501
	case codes.Unavailable:
		return 503
	case codes.DeadlineExceeded:
		return 504
	}
	return 500 // Unknown, Internal, DataLoss and codes this table does not know
}

// trailerPrefix marks stored trailer metadata among the stored header metadata, as net/http
// marks trailers. Metadata keys are lowercase, so no header key starts with it.
const trailerPrefix = "Trailer:"

// captureStream records the header and trailer metadata a handler sets, so a replay sends
// them again.
type captureStream struct {
	grpc.ServerTransportStream
	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
}

func (c *captureStream) SetHeader(md metadata.MD) error {
	c.record(&c.header, md)
	return c.ServerTransportStream.SetHeader(md)
}

func (c *captureStream) SendHeader(md metadata.MD) error {
	c.record(&c.header, md)
	return c.ServerTransportStream.SendHeader(md)
}

func (c *captureStream) SetTrailer(md metadata.MD) error {
	c.record(&c.trailer, md)
	return c.ServerTransportStream.SetTrailer(md)
}

func (c *captureStream) record(to *metadata.MD, md metadata.MD) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if *to == nil {
		*to = metadata.MD{}
	}
	for k, vs := range md {
		k = strings.ToLower(k)
		(*to)[k] = append((*to)[k], vs...)
	}
}

// stored returns the metadata to keep with the reply, or nil.
func (c *captureStream) stored() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.header) == 0 && len(c.trailer) == 0 {
		return nil
	}
	h := make(map[string][]string, len(c.header)+len(c.trailer))
	for k, vs := range c.header {
		h[k] = slices.Clone(vs)
	}
	for k, vs := range c.trailer {
		h[trailerPrefix+k] = slices.Clone(vs)
	}
	return h
}
