package verify

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/itocompute/itogate/gatekeeper/strictjson"
)

// Defaults of TokenOptions.
const (
	// DefaultLeeway is the clock skew tolerated on exp, nbf and iat.
	DefaultLeeway = 30 * time.Second
	// DefaultMaxTokenBytes bounds a token before it is parsed: 16 KiB.
	DefaultMaxTokenBytes = 16 << 10
)

// maxJSONDepth bounds nesting in JOSE headers and claims.
const maxJSONDepth = 16

// maxNumericDate is 9999-12-31T23:59:59Z; larger dates are refused.
const maxNumericDate = 253402300799

// forbiddenHeaders are refused in any token: embedded or remote keys (never
// trusted, never fetched), critical extensions (none understood),
// unencoded payloads and JWE/compression members.
var forbiddenHeaders = []string{"jwk", "jku", "x5u", "x5c", "crit", "b64", "zip", "enc"}

// TokenOptions configures one TokenVerifier, i.e. one purpose.
type TokenOptions struct {
	// Purpose is PurposeCaller, PurposeDepositor, PurposeEntitlement,
	// PurposeConfirmation or PurposeEvals.
	Purpose Purpose
	// Issuer is required; the iss claim must equal it exactly.
	Issuer string
	// Audience is required; the aud claim (string or array of strings) must
	// contain it.
	Audience string
	// Type is the required JOSE "typ" header (e.g. "ito-entitlement+jwt"),
	// compared case-insensitively with an optional "application/" prefix
	// (RFC 7515 §4.1.9). Empty means any typ an IdP sets passes (callers'
	// IdPs), except itogate's own token types ("ito-…", ReservedTypePrefix):
	// a ticket, entitlement, confirmation or eval report is never taken
	// for a token of a purpose that names no type.
	Type string
	// Keys are the public verification keys of this purpose only. Every key
	// must have a unique kid and an alg; the token's alg must equal its key's
	// alg. The set is copied at construction.
	Keys jwk.Set
	// Leeway is the clock skew tolerated on exp, nbf and iat; 0 means
	// DefaultLeeway, negative is an error.
	Leeway time.Duration
	// StrictExpiry makes exp a hard end: the token is expired from exp on
	// the verifier's clock, with no leeway; Leeway still applies to nbf and
	// iat. Tickets use it, so that a ticket verifies offline for at most its
	// lifetime (exp − iat) whatever leeway a verifier is given.
	StrictExpiry bool
	// MaxBytes bounds the raw token; 0 means DefaultMaxTokenBytes, negative
	// is an error. Larger tokens fail with KindTooLarge before parsing.
	MaxBytes int
	// RequireJTI makes a missing or empty jti claim a KindClaims failure.
	RequireJTI bool
	// CacheEntries is the number of successful verifications the verifier
	// remembers, keyed by the SHA-256 of the exact token bytes (see
	// TokenVerifier): 0 disables the cache, negative is an error.
	// CacheEntriesFor(Purpose) is the recommended value. Confirmation tokens
	// are single-use, so PurposeConfirmation refuses a cache.
	CacheEntries int
}

// TokenVerifier verifies compact JWS tokens of one purpose. It is safe for
// concurrent use and never performs I/O.
//
// # Cache
//
// With TokenOptions.CacheEntries = N > 0 the verifier remembers up to N
// successful verifications: a map from the SHA-256 of the exact token bytes
// (never the token) to the verified Claims and exp + leeway (exp alone with
// StrictExpiry). A later Verify of the same bytes skips parsing and the
// signature and runs only the checks that depend on now (exp, nbf, iat,
// with leeway), so it returns what a full verification at that now would,
// the same *Error included. This is safe
// because the cache holds only successes, each after a full verification
// with this verifier's purpose, issuer, audience, typ and keys, which are
// fixed for the verifier's life (a purpose never sees another's cache); any
// other byte string, one changed byte included, is a different key and is
// fully verified. Failures are never stored. Hits return a deep copy.
//
// Bound: N entries of at most 12 KiB each, i.e. N × 12 KiB (12 MiB for
// DefaultCacheEntries). An entry's bytes (the entry, its index slot and the
// decoded claims) are a conservative estimate, at or above the live heap
// (a development entitlement token: 2.3 KiB of heap, estimated 3.9 KiB).
// Tokens over 4 KiB, and claims estimated over 12 KiB, are verified every
// time and never stored. When full, the least recently used entry is
// dropped; an entry is also dropped once expired at the now of a later call
// (on lookup, and by a sweep that examines two entries per call). Each call
// holds one mutex for O(1) work (hash and deep copy run outside it);
// CacheStats reports hits, misses, evictions and size.
type TokenVerifier struct {
	purpose    Purpose
	issuer     string
	audience   string
	typ        string
	keys       map[string]resolvedKey
	leeway     time.Duration
	expLeeway  time.Duration // leeway on exp: leeway, or 0 with StrictExpiry
	maxBytes   int
	requireJTI bool
	cache      *tokenCache // nil: every Verify is a full verification
}

// Claims are the verified claims of a token.
type Claims struct {
	// KeyID is the kid of the key that verified the signature.
	KeyID string
	// JTI, Subject and Issuer are the jti, sub and iss claims ("" if absent;
	// iss is always present).
	JTI, Subject, Issuer string
	// Audience is the aud claim as a list.
	Audience []string
	// IssuedAt and Expiry are iat and exp (always present); NotBefore is nbf
	// or the zero time.
	IssuedAt, Expiry, NotBefore time.Time
	// Raw holds every claim. Objects are map[string]any, arrays []any;
	// numbers are int64 when integral (exactly, so policy input keeps exact
	// integers), otherwise float64. An integer literal outside int64 is
	// refused with KindClaims rather than rounded.
	Raw map[string]any
}

// NewTokenVerifier validates opts and prepares a verifier. It fails when a
// required option is missing, Leeway or MaxBytes is negative, or any key is
// private, symmetric, lacks kid or alg, has an unaccepted alg, or does not
// match its alg.
func NewTokenVerifier(opts TokenOptions) (*TokenVerifier, error) {
	if !opts.Purpose.isToken() {
		return nil, fmt.Errorf("token verifier: unknown purpose %q", opts.Purpose)
	}
	prefix := "token verifier " + string(opts.Purpose)
	if opts.Issuer == "" {
		return nil, fmt.Errorf("%s: issuer is required", prefix)
	}
	if opts.Audience == "" {
		return nil, fmt.Errorf("%s: audience is required", prefix)
	}
	if opts.Leeway < 0 {
		return nil, fmt.Errorf("%s: negative leeway", prefix)
	}
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("%s: negative max bytes", prefix)
	}
	if opts.CacheEntries < 0 {
		return nil, fmt.Errorf("%s: negative cache entries", prefix)
	}
	if opts.CacheEntries > 0 && opts.Purpose == PurposeConfirmation {
		return nil, fmt.Errorf("%s: confirmation tokens are single-use and are never cached (cache entries must be 0)", prefix)
	}
	keys, err := indexKeys(opts.Keys)
	if err != nil {
		return nil, fmt.Errorf("%s: keys: %w", prefix, err)
	}
	v := &TokenVerifier{
		purpose:    opts.Purpose,
		issuer:     opts.Issuer,
		audience:   opts.Audience,
		typ:        opts.Type,
		keys:       keys,
		leeway:     opts.Leeway,
		maxBytes:   opts.MaxBytes,
		requireJTI: opts.RequireJTI,
	}
	if v.leeway == 0 {
		v.leeway = DefaultLeeway
	}
	if !opts.StrictExpiry {
		v.expLeeway = v.leeway
	}
	if v.maxBytes == 0 {
		v.maxBytes = DefaultMaxTokenBytes
	}
	if opts.CacheEntries > 0 {
		v.cache = newTokenCache(opts.CacheEntries)
	}
	return v, nil
}

// Purpose returns the verifier's purpose.
func (v *TokenVerifier) Purpose() Purpose { return v.purpose }

// Leeway is the clock skew this verifier tolerates on nbf, iat and, unless
// StrictExpiry, exp. The
// admission puts it into the policy input (leeway_seconds) so the policy
// applies the very same tolerance: one leeway, configured in one place.
func (v *TokenVerifier) Leeway() time.Duration { return v.leeway }

// Verify checks raw, a compact JWS, at time now and returns its claims.
//
// Order: size; shape (exactly three base64url parts, so JSON serialization
// and JWE are refused); header (alg, forbidden members, typ, kid → key, alg
// equal to the key's configured alg); signature; then claims (types, iss,
// aud, exp, nbf, iat, with leeway against now). A token that is both badly
// signed and expired therefore fails with KindSignature.
//
// Every failure is an *Error with the verifier's purpose.
//
// With a cache (TokenOptions.CacheEntries), a token whose exact bytes
// verified before skips everything but the checks that depend on now (exp,
// nbf, iat), which run as above: the result, claims or *Error, is the same
// as without the cache. The returned Claims are the caller's own (a deep
// copy on every call): changing them changes nothing in the verifier.
func (v *TokenVerifier) Verify(raw []byte, now time.Time) (*Claims, error) {
	if v.cache == nil || len(raw) > cacheMaxTokenBytes || len(raw) > v.maxBytes {
		if v.cache != nil {
			v.cache.miss()
		}
		return v.verify(raw, now)
	}
	key := sha256.Sum256(raw)
	if cached, ok := v.cache.get(&key, now); ok {
		if err := v.checkTimes(cached, now); err != nil {
			return nil, err
		}
		return cached.clone(), nil
	}
	c, err := v.verify(raw, now)
	if err != nil {
		return nil, err
	}
	v.cache.put(&key, c.clone(), c.Expiry.Add(v.expLeeway), now)
	return c, nil
}

// verify is the full verification of Verify, without the cache.
func (v *TokenVerifier) verify(raw []byte, now time.Time) (*Claims, error) {
	if len(raw) > v.maxBytes {
		return nil, v.fail(KindTooLarge, "token exceeds the size limit")
	}
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return nil, v.fail(KindMalformed, "JSON-serialized JWS is not accepted")
	}
	parts := bytes.Split(raw, []byte("."))
	switch len(parts) {
	case 3:
	case 5:
		return nil, v.fail(KindMalformed, "encrypted tokens (JWE) are not accepted")
	default:
		return nil, v.fail(KindMalformed, "not a compact JWS")
	}
	for _, p := range parts {
		if !isBase64URL(p) {
			return nil, v.fail(KindMalformed, "token part is not unpadded base64url")
		}
	}
	hdrJSON, err := base64.RawURLEncoding.Strict().DecodeString(string(parts[0]))
	if err != nil || len(parts[0]) == 0 {
		return nil, v.fail(KindMalformed, "header is not base64url")
	}
	hdr, err := strictjson.DecodeObject(hdrJSON, maxJSONDepth)
	if err != nil {
		return nil, v.fail(KindMalformed, "header is not a strict JSON object")
	}
	kid, key, verr := v.checkHeader(hdr)
	if verr != nil {
		return nil, verr
	}
	if len(parts[1]) == 0 || len(parts[2]) == 0 {
		return nil, v.fail(KindMalformed, "empty payload or signature")
	}
	if _, err := base64.RawURLEncoding.Strict().DecodeString(string(parts[2])); err != nil {
		return nil, v.fail(KindMalformed, "signature is not base64url")
	}
	// jwx parses the header again, with types for every registered member
	// (cty, x5t, …); one it refuses is a header fault, not a bad signature.
	if _, err := jws.Parse(raw, jws.WithCompact()); err != nil {
		return nil, v.fail(KindHeader, "header refused by the JOSE parser")
	}
	payload, err := jws.Verify(raw, jws.WithKey(key.alg, key.pub), jws.WithCompact())
	if err != nil {
		return nil, v.fail(KindSignature, "signature does not verify")
	}
	return v.checkClaims(kid, payload, now)
}

func (v *TokenVerifier) fail(k Kind, reason string) *Error { return fail(v.purpose, k, reason) }

func (v *TokenVerifier) checkHeader(hdr map[string]any) (string, resolvedKey, *Error) {
	algV, present := hdr["alg"]
	alg, isString := algV.(string)
	switch {
	case !present || !isString || alg == "":
		return "", resolvedKey{}, v.fail(KindHeader, "alg header missing or not a string")
	case strings.EqualFold(alg, "none"):
		return "", resolvedKey{}, v.fail(KindHeader, "alg none is refused")
	case len(alg) >= 2 && strings.EqualFold(alg[:2], "HS"):
		return "", resolvedKey{}, v.fail(KindHeader, "HMAC algorithms are refused")
	}
	for _, name := range forbiddenHeaders {
		if _, ok := hdr[name]; ok {
			return "", resolvedKey{}, v.fail(KindHeader, "forbidden header "+name)
		}
	}
	if v.typ != "" {
		typ, ok := hdr["typ"].(string)
		if !ok || !sameMediaType(typ, v.typ) {
			return "", resolvedKey{}, v.fail(KindHeader, "typ header missing or not "+v.typ)
		}
	} else if typ, ok := hdr["typ"].(string); ok && isReservedType(typ) {
		return "", resolvedKey{}, v.fail(KindHeader, "typ "+typ+" is an itogate token type, not this purpose's")
	}
	kidV, present := hdr["kid"]
	kid, isString := kidV.(string)
	if !present || !isString || kid == "" {
		return "", resolvedKey{}, v.fail(KindUnknownKey, "kid header missing or not a string")
	}
	key, ok := v.keys[kid]
	if !ok {
		return "", resolvedKey{}, v.fail(KindUnknownKey, "kid is not a key of this purpose")
	}
	if alg != key.alg.String() {
		return "", resolvedKey{}, v.fail(KindHeader, "alg differs from the key's configured alg")
	}
	return kid, key, nil
}

// ReservedTypePrefix begins the typ of every token type itogate defines
// (ito-entitlement+jwt, ito-confirmation+jwt, ito-eval+jwt,
// ito-ticket+jwt): a verifier with no Type refuses them.
const ReservedTypePrefix = "ito-"

// isReservedType reports whether typ (RFC 7515 §4.1.9: case-insensitive,
// "application/" optional) is one of itogate's own token types.
func isReservedType(typ string) bool {
	if len(typ) > len("application/") && strings.EqualFold(typ[:len("application/")], "application/") {
		typ = typ[len("application/"):]
	}
	return len(typ) >= len(ReservedTypePrefix) && strings.EqualFold(typ[:len(ReservedTypePrefix)], ReservedTypePrefix)
}

// sameMediaType compares typ values per RFC 7515 §4.1.9: case-insensitive,
// "application/" optional.
func sameMediaType(a, b string) bool {
	strip := func(s string) string {
		if len(s) > len("application/") && strings.EqualFold(s[:len("application/")], "application/") {
			return s[len("application/"):]
		}
		return s
	}
	return strings.EqualFold(strip(a), strip(b))
}

func isBase64URL(p []byte) bool {
	for _, c := range p {
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

func (v *TokenVerifier) checkClaims(kid string, payload []byte, now time.Time) (*Claims, error) {
	doc, err := strictjson.DecodeObject(payload, maxJSONDepth)
	if err != nil {
		return nil, v.fail(KindMalformed, "claims are not a strict JSON object")
	}
	conv, err := convertNumbers(doc)
	if err != nil {
		return nil, v.fail(KindClaims, err.Error())
	}
	rawClaims := conv.(map[string]any)
	c := &Claims{KeyID: kid, Raw: rawClaims}

	var ok bool
	if c.Issuer, ok = rawClaims["iss"].(string); !ok {
		return nil, v.fail(KindClaims, "iss missing or not a string")
	}
	if c.Audience, err = audience(rawClaims["aud"]); err != nil {
		return nil, v.fail(KindClaims, err.Error())
	}
	if c.Subject, err = optionalString(rawClaims, "sub"); err != nil {
		return nil, v.fail(KindClaims, err.Error())
	}
	if c.JTI, err = optionalString(rawClaims, "jti"); err != nil {
		return nil, v.fail(KindClaims, err.Error())
	}
	if v.requireJTI && c.JTI == "" {
		return nil, v.fail(KindClaims, "jti missing")
	}
	if c.Expiry, err = numericDate(rawClaims, "exp", true); err != nil {
		return nil, v.fail(KindClaims, err.Error())
	}
	if c.IssuedAt, err = numericDate(rawClaims, "iat", true); err != nil {
		return nil, v.fail(KindClaims, err.Error())
	}
	if c.NotBefore, err = numericDate(rawClaims, "nbf", false); err != nil {
		return nil, v.fail(KindClaims, err.Error())
	}

	if c.Issuer != v.issuer {
		return nil, v.fail(KindIssuer, "iss is not the configured issuer")
	}
	found := false
	for _, a := range c.Audience {
		found = found || a == v.audience
	}
	if !found {
		return nil, v.fail(KindAudience, "aud does not contain the configured audience")
	}
	if err := v.checkTimes(c, now); err != nil {
		return nil, err
	}
	return c, nil
}

// checkTimes is every check of Verify that depends on now, in Verify's
// order: exp, nbf, iat, each with leeway (none on exp with StrictExpiry). A
// cached verification runs exactly this against each later now (cache.go).
func (v *TokenVerifier) checkTimes(c *Claims, now time.Time) *Error {
	if !now.Before(c.Expiry.Add(v.expLeeway)) {
		return v.fail(KindExpired, "token expired")
	}
	if !c.NotBefore.IsZero() && now.Before(c.NotBefore.Add(-v.leeway)) {
		return v.fail(KindNotYetValid, "token not valid yet (nbf)")
	}
	if c.IssuedAt.After(now.Add(v.leeway)) {
		return v.fail(KindIssuedInFuture, "token issued in the future (iat)")
	}
	return nil
}

func optionalString(m map[string]any, name string) (string, error) {
	val, present := m[name]
	if !present {
		return "", nil
	}
	s, ok := val.(string)
	if !ok {
		return "", errors.New(name + " is not a string")
	}
	return s, nil
}

func audience(val any) ([]string, error) {
	switch a := val.(type) {
	case string:
		return []string{a}, nil
	case []any:
		out := make([]string, 0, len(a))
		for _, e := range a {
			s, ok := e.(string)
			if !ok {
				return nil, errors.New("aud array holds a non-string")
			}
			out = append(out, s)
		}
		return out, nil
	case nil:
		return nil, errors.New("aud missing")
	default:
		return nil, errors.New("aud is neither a string nor an array of strings")
	}
}

// numericDate reads a NumericDate claim (RFC 7519 §2: seconds since the
// epoch, possibly fractional) in [0, year 9999].
func numericDate(m map[string]any, name string, required bool) (time.Time, error) {
	val, present := m[name]
	if !present {
		if required {
			return time.Time{}, errors.New(name + " missing")
		}
		return time.Time{}, nil
	}
	switch n := val.(type) {
	case int64:
		if n < 0 || n > maxNumericDate {
			return time.Time{}, errors.New(name + " out of range")
		}
		return time.Unix(n, 0).UTC(), nil
	case float64:
		if n < 0 || n > maxNumericDate {
			return time.Time{}, errors.New(name + " out of range")
		}
		sec, frac := math.Modf(n)
		return time.Unix(int64(sec), int64(frac*1e9)).UTC(), nil
	default:
		return time.Time{}, errors.New(name + " is not a number")
	}
}

// convertNumbers replaces every json.Number in v: integer literals become
// int64 (an integer literal outside int64 is an error, never rounded); other
// numbers become int64 when integral and within ±2^53, otherwise float64.
func convertNumbers(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			c, err := convertNumbers(e)
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
		return t, nil
	case []any:
		for i, e := range t {
			c, err := convertNumbers(e)
			if err != nil {
				return nil, err
			}
			t[i] = c
		}
		return t, nil
	case json.Number:
		return convertNumber(string(t))
	default:
		return v, nil
	}
}

func convertNumber(s string) (any, error) {
	if !strings.ContainsAny(s, ".eE") {
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, errors.New("integer claim outside the int64 range")
		}
		return i, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, errors.New("number claim outside the float64 range")
	}
	if f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
		return int64(f), nil
	}
	return f, nil
}
