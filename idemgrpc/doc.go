// Package idemgrpc makes unary gRPC calls idempotent: a server interceptor that runs a handler
// at most once per idempotency key and replays its reply to every retry, and a client
// interceptor that sends one key per call and retries while that is safe.
//
//	eng, _ := idem.New(store, idem.Options{})
//	icpt, _ := idemgrpc.UnaryServerInterceptor(idemgrpc.ServerOptions{
//		Runner:  eng,
//		Scope:   idemgrpc.KeyedMetadataScope("x-api-key", scopeSecret), // whose key it is
//		Methods: []string{"/payments.v1.Payments/Charge"},
//	})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recovery, auth, icpt))
//
//	ci, _ := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientOptions{})
//	conn, _ := grpc.NewClient(target, grpc.WithChainUnaryInterceptor(ci), ...)
//
// It is the gRPC face of the same engine, store and rules as the HTTP middleware (idemhttp):
// the same stores, the same storage keys (scope, '|', key), the same Policy.
//
// # The server interceptor
//
// A call to a processed method (ServerOptions.Methods, every unary method by default) that
// carries the idempotency-key metadata (MetadataKey: 1 to 255 printable ASCII characters, sent
// once) is run through the engine. Its fingerprint is the SHA-256 of the full method name and of
// the request message marshalled deterministically (proto.MarshalOptions{Deterministic: true}:
// map entries in key order), as the server decoded it, so two encodings of one request by
// different clients are the same request, and the same key sent to another method is a
// mismatch. The storage key is the scope (ServerOptions.Scope, required: such as
// KeyedMetadataScope hashing an API key under a secret, or SingleCaller for one trusted caller) and the key, as idemhttp.StorageKey builds it, so operators find a record with
// `idem inspect` as for HTTP; the record's route (idem.Record.Route, shown by `idem list` and
// the operator console) is the full method name.
//
// The first call runs the handler. Its outcome is stored: the reply message (as a
// google.protobuf.Any, so with its full type name) or the error status (code, message and
// details, as a google.rpc.Status), with the header and trailer metadata the handler set. Every
// later call with the key and the same request gets the stored reply or status, its header and
// trailer metadata, and the header metadata idempotent-replayed: true (ReplayedKey). The
// handler does not run again.
//
// A call without a key passes through untouched, or is refused with InvalidArgument when
// ServerOptions.RequireKey is set. Streaming calls are not processed: add the interceptor with
// grpc.ChainUnaryInterceptor only.
//
// # Which replies are kept
//
// The engine's Policy decides, as for HTTP: the interceptor records a reply with the HTTP
// status of its code (HTTPStatus, the mapping google.rpc.Code documents), so idem.DefaultPolicy
// and idem.StoreServerErrors work unchanged. With the default policy:
//
//	OK, InvalidArgument, FailedPrecondition, OutOfRange, NotFound      kept and replayed
//	Unavailable, Internal, Unknown, DataLoss, Unimplemented            released: a retry runs the handler
//	ResourceExhausted, Aborted, AlreadyExists                          released
//	PermissionDenied, Unauthenticated                                  released (the caller fixes something first)
//	DeadlineExceeded, Canceled                                         uncertain: held, never silently re-run
//
// A handler error that is not a status is Unknown, as gRPC sends it; a context error is
// Canceled or DeadlineExceeded, as gRPC converts it. DeadlineExceeded and Canceled from a handler
// that had begun its work mean it gave up waiting, not that nothing happened: a downstream call
// it made may have taken effect. So they are held as uncertain (the engine's UncertainPolicy:
// by default a retry gets Aborted until the lease runs out, and then runs the handler again),
// never released at once. A handler whose effects roll back when it gives up (one database
// transaction) can have them released with idem.Options{Uncertain: idem.UncertainRelease}.
//
// A handler that panics leaves the claim released and the panic goes on: put a recovery
// interceptor outside this one (grpc-go does not recover handler panics), and the retry runs the
// handler.
//
// # Errors the interceptor answers itself
//
// Each carries a google.rpc.ErrorInfo (domain ErrorDomain, a Reason* constant), as Google's
// AIP-193 asks of every error:
//
//   - missing key (with RequireKey), invalid key or scope: InvalidArgument;
//   - the key used before with another request or method: FailedPrecondition. Google's error
//     model keeps InvalidArgument for arguments that are wrong whatever the state of the system,
//     and FailedPrecondition for a request refused because of that state, which the client must
//     change before retrying (here: use a new key). The HTTP face answers 422 for the same case;
//   - a call with the key in flight: Aborted with a google.rpc.RetryInfo saying when the answer
//     is expected (the engine's estimate, at least one second). Aborted is google.rpc.Code's
//     code for a concurrency conflict; the RetryInfo says that this one ends by itself and when,
//     and the client interceptor retries it after that delay (a generic client that retries
//     only Unavailable does not hammer the server with it). With idem.Options.Wait the
//     duplicate waits for the reply instead;
//   - the store unreachable before the handler ran: Unavailable with a RetryInfo
//     (ServerOptions.StoreRetryAfter). The handler does not run: fail closed;
//   - a stored reply that cannot be rebuilt: Internal (ReasonNotReplayable), never a reply of
//     another type;
//   - a call whose reply was larger than ServerOptions.MaxReplyBytes (1 MiB by default), so
//     not kept: AlreadyExists (ReasonNotRetained), with idempotent-replayed: true. The
//     operation was done and is not done again; only its reply is gone. AlreadyExists is the
//     code for "what you asked to create exists already", which is what the key says here.
//
// If the handler ran but its outcome could not be stored (the store failed, the lease was lost),
// the caller gets the handler's own reply and a warning is logged; a retry then sees Aborted
// until the lease runs out.
//
// # Replay and message types
//
// On a replay there is no reply value to copy: the stored message is rebuilt from its full type
// name, resolved in ServerOptions.Types (protoregistry.GlobalTypes by default, where every
// generated message type registers itself at init). The name travels with the record, so any
// server process that shares the store, in any later release that still has the type, replays
// it; a reply type renamed between releases fails closed with Internal. Messages built with
// dynamicpb need a resolver that knows them.
//
// # The client interceptor
//
// UnaryClientInterceptor gives each call one key, sent on every attempt: one the caller set (in
// the outgoing metadata, or with idemclient.WithKey to tie it to an intent stored with the
// user's action), or a new UUIDv7. It retries Unavailable, Aborted and ResourceExhausted that
// carry a RetryInfo (waiting at least that long), and DeadlineExceeded of an attempt
// (ClientOptions.AttemptTimeout) while the call's own context lasts; nothing else. The pause is
// exponential backoff with full jitter, capped per pause (MaxDelay), in attempts (MaxAttempts)
// and in total time (MaxElapsed). These are idemclient's rules, in gRPC's terms.
//
// Retrying is safe because the key makes a second arrival harmless: point the client
// interceptor only at servers that run the server interceptor (or honour the key otherwise) on
// the methods it retries (ClientOptions.Methods).
package idemgrpc
