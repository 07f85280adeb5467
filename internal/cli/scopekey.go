package cli

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"io"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/gateway"
	"github.com/idemkit/idem/idemhttp"
)

// scopeFlags turn what a client sent (the value of the gateway's scope header and its
// Idempotency-Key) into the storage key the gateway keeps its record under, for inspect,
// release and list. Without --scope-value or --scope none, a KEY argument is the storage key
// itself (SCOPE|KEY: a gateway's scope hash, or a consumer's scope, then the key).
type scopeFlags struct {
	value      string // --scope-value: the raw scope header value, hashed as the gateway does
	scope      string // --scope: "none" for a gateway run with --scope none
	secret     string // --scope-secret (env IDEM_SCOPE_SECRET)
	secretFile string // --scope-secret-file (env IDEM_SCOPE_SECRET_FILE)
	// secretFromEnv: secret is IDEM_SCOPE_SECRET's, which a --scope-secret-file flag overrides.
	secretFromEnv bool
	face          string // --scope-face: http (the gateway, idemhttp) or grpc (idemgrpc)
	fs            *flag.FlagSet
}

// Faces whose keyed scopes --scope-face knows.
const (
	faceHTTP = "http" // the gateway, idemhttp.KeyedHeaderScope: HMAC-SHA256 of the value
	faceGRPC = "grpc" // idemgrpc.KeyedMetadataScope: HMAC-SHA256 of the value's length (8 bytes) and the value
)

// keyedScope returns the scope face stores a caller's value under, with secret.
func keyedScope(face string, secret []byte, value string) string {
	if face == faceGRPC {
		m := hmac.New(sha256.New, secret)
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(value)))
		m.Write(n[:])
		_, _ = io.WriteString(m, value)
		return hex.EncodeToString(m.Sum(nil))
	}
	return idemhttp.KeyedHashScope(secret, value)
}

// bindScope adds the scope flags to fs. The secret's flags and variables are serve's.
func bindScope(e *env, fs *flag.FlagSet) *scopeFlags {
	s := &scopeFlags{fs: fs}
	fs.StringVar(&s.value, "scope-value", "", "the caller's value of the gateway's scope header (its API key, say): KEY is then the client's key, and the storage key is computed as the gateway does, with the HMAC under the scope secret")
	fs.StringVar(&s.face, "scope-face", faceHTTP, "what hashed --scope-value into the scope: http (idem serve, idemhttp's KeyedHeaderScope) or grpc (idemgrpc's KeyedMetadataScope, with the value of its metadata key)")
	fs.StringVar(&s.scope, "scope", "", "none: KEY is the client's key of a gateway run with --scope none (or of a request sent without the scope header)")
	// Not a default: -h must not print the secret from the environment.
	fs.StringVar(&s.secret, "scope-secret", "", "the gateways' scope secret, for --scope-value (env IDEM_SCOPE_SECRET; prefer it or the file: a command line is visible to other users)")
	fs.StringVar(&s.secretFile, "scope-secret-file", e.getenv("IDEM_SCOPE_SECRET_FILE"), "file holding the scope secret, for --scope-value (env IDEM_SCOPE_SECRET_FILE)")
	if v := e.getenv("IDEM_SCOPE_SECRET"); v != "" {
		s.secret, s.secretFromEnv = v, true // flags parsed later override it
	}
	return s
}

// given reports whether --scope-value was given (an empty value is a header sent empty).
func (s *scopeFlags) given() bool { return s.flagGiven("scope-value") }

// flagGiven reports whether the flag name was on the command line.
func (s *scopeFlags) flagGiven(name string) bool {
	set := false
	s.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// scoped reports whether KEY arguments are client keys rather than storage keys.
func (s *scopeFlags) scoped() bool { return s.given() || s.scope != "" }

// scopePrefix returns the scope of the flags followed by the separator: the start of every
// storage key in that scope ("" without scope flags).
func (s *scopeFlags) scopePrefix() (string, error) {
	switch {
	case s.face != faceHTTP && s.face != faceGRPC:
		return "", usageError("--scope-face %q: want http or grpc", s.face)
	case s.scope != "" && s.scope != gateway.ScopeNone:
		return "", usageError("--scope %q: the only value is none", s.scope)
	case s.scope != "" && s.given():
		return "", usageError("--scope none and --scope-value exclude each other")
	case s.scope == gateway.ScopeNone:
		return idem.ScopedKey("", ""), nil
	case !s.given():
		return "", nil
	}
	secret, err := s.load()
	if err != nil {
		return "", err
	}
	return idem.ScopedKey(keyedScope(s.face, secret, s.value), ""), nil
}

// load returns the scope secret, as serve reads it.
func (s *scopeFlags) load() ([]byte, error) {
	c := gateway.Config{ScopeSecret: s.secret, ScopeSecretFile: s.secretFile}
	if s.secretFromEnv && s.secretFile != "" && s.flagGiven("scope-secret-file") && !s.flagGiven("scope-secret") {
		c.ScopeSecret = ""
	}
	if c.ScopeSecret != "" && c.ScopeSecretFile != "" {
		return nil, usageError("--scope-secret (or IDEM_SCOPE_SECRET) and --scope-secret-file exclude each other")
	}
	secret, err := c.LoadScopeSecret()
	if err != nil {
		return nil, err
	}
	if secret == nil {
		return nil, usageError("--scope-value needs the gateways' scope secret, to compute the HMAC the gateway stores instead of the value: " +
			"set IDEM_SCOPE_SECRET, --scope-secret-file FILE or --scope-secret SECRET")
	}
	return secret, nil
}

// storageKey returns the storage key of the KEY argument: the argument itself without scope
// flags, else the key the gateway stores the client key arg under in that scope.
func (s *scopeFlags) storageKey(arg string) (string, error) {
	if !s.scoped() {
		return arg, nil
	}
	if _, err := s.scopePrefix(); err != nil { // the flags' own errors first
		return "", err
	}
	if !idemhttp.ValidKey(arg) {
		return "", usageError("client key %q is not 1 to 255 printable ASCII characters, so no gateway stored it (without --scope-value or --scope, KEY is the storage key)", arg)
	}
	if s.scope == gateway.ScopeNone {
		return idem.ScopedKey("", arg), nil
	}
	secret, err := s.load()
	if err != nil {
		return "", err
	}
	return idem.ScopedKey(keyedScope(s.face, secret, s.value), arg), nil
}

// splitKey splits a storage key into its scope (a gateway's scope hash, a consumer's scope) and
// the client's key; ok is false for a key that idem.ScopedKey did not make (one passed to
// Engine.Do as it is).
func splitKey(key string) (scope, clientKey string, ok bool) {
	return idem.SplitScopedKey(key)
}
