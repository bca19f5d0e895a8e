// Package ticket signs and verifies admission tickets: the compact JWS
// itogate hands back on an allowed train.create, so that the place where the
// run's workloads are created (the Kubernetes webhook, a Slurm prolog, a Ray
// job submitter) can check, offline, that the run was admitted and for what.
//
// A ticket is its own key purpose ("ticket"): itogate signs it with a key
// used for nothing else, with the JOSE typ Type, for the fixed workload
// audience, and publishes the public keys as a JWKS. Verification goes
// through verify.TokenVerifier, so the rules of every other token hold:
// the algorithm comes from the configured key, never from the token; "none",
// HMAC, embedded or remote keys (jwk, jku, x5u, x5c) and JSON-serialized
// JWS are refused.
//
// Claims (docs/tickets.md):
//
//	iss, sub (account), aud, jti (the decision id), iat, exp,
//	run_id, booking_id, action, manifest_digest,
//	world_size, nodes, gpus_per_node, gpu_type, region, bundle_revision
//
// exp is never after the booking term's end nor the run's declared
// wall-clock end (admission time + budget.max_wall_clock_hours), whichever
// comes first.
package ticket

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Type is the JOSE typ of every ticket; no other purpose's verifier accepts
// it, and the ticket verifier accepts nothing else.
const Type = "ito-ticket+jwt"

// DefaultAudience is the aud of tickets: the workload boundary, never
// itogate's own API audience.
const DefaultAudience = "itogate-workload"

// Ticket lifetimes (exp − iat): a ticket lives minutes and its holder
// renews it while the run may run (POST /v1/runs/{run_id}/ticket), and the
// Verifier allows no leeway on exp, so a withdrawn run's last ticket
// verifies offline for at most the lifetime (docs/tickets.md).
const (
	// DefaultLifetime is the lifetime when tickets.lifetime is not set.
	DefaultLifetime = 5 * time.Minute
	// MinLifetime and MaxLifetime bound tickets.lifetime.
	MinLifetime = time.Minute
	MaxLifetime = time.Hour
)

// Errors of Signer.Issue and FromVerified; they wrap ErrClaims.
var ErrClaims = errors.New("ticket claims")

// Claims are the claims of one ticket. Times are whole Unix seconds on the
// wire; counts are GPUs and nodes.
type Claims struct {
	Issuer   string // iss: the configured ticket issuer
	Account  string // sub: the account admitted
	Audience string // aud: DefaultAudience unless configured
	// ID is the jti: the admission's decision id ("dec_" + 32 hex).
	ID             string
	RunID          string // run_id: "run_" + 26 characters
	BookingID      string // booking_id
	Action         string // action: "train.create"
	ManifestDigest string // manifest_digest: "sha256:<64 hex>" of the admitted manifest bytes
	// The admitted topology: WorldSize = Nodes × GPUsPerNode GPUs of GPUType.
	WorldSize, Nodes, GPUsPerNode int64
	GPUType                       string
	Region                        string
	BundleRevision                string // the policy bundle that decided
	IssuedAt, Expiry              time.Time
}

// Map is the JSON claim set of c.
func (c Claims) Map() map[string]any {
	return map[string]any{
		"iss": c.Issuer, "sub": c.Account, "aud": c.Audience, "jti": c.ID,
		"iat": c.IssuedAt.Unix(), "exp": c.Expiry.Unix(),
		"run_id": c.RunID, "booking_id": c.BookingID, "action": c.Action,
		"manifest_digest": c.ManifestDigest,
		"world_size":      c.WorldSize, "nodes": c.Nodes, "gpus_per_node": c.GPUsPerNode,
		"gpu_type": c.GPUType, "region": c.Region, "bundle_revision": c.BundleRevision,
	}
}

var reDigest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// validate checks what Issue signs and what FromVerified accepts.
func (c Claims) validate() error {
	var errs []error
	for name, v := range map[string]string{
		"sub": c.Account, "jti": c.ID, "run_id": c.RunID, "booking_id": c.BookingID,
		"action": c.Action, "gpu_type": c.GPUType, "region": c.Region,
	} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is empty", name))
		}
	}
	if !reDigest.MatchString(c.ManifestDigest) {
		errs = append(errs, errors.New("manifest_digest is not sha256:<64 lowercase hex>"))
	}
	if c.Nodes < 1 || c.GPUsPerNode < 1 || c.WorldSize != c.Nodes*c.GPUsPerNode {
		errs = append(errs, errors.New("topology: nodes and gpus_per_node must be positive and world_size their product"))
	}
	if !c.Expiry.After(c.IssuedAt) {
		errs = append(errs, errors.New("exp is not after iat"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrClaims, err)
	}
	return nil
}

// Expiry is a ticket's exp: the earlier of the booking term's end and the
// run's declared wall-clock end, admittedAt + maxWallClockHours (the
// manifest's budget.max_wall_clock_hours, fractional hours allowed), in
// whole seconds rounded down so that it is never after either bound.
func Expiry(admittedAt, termEnd time.Time, maxWallClockHours float64) time.Time {
	declared := admittedAt.Add(time.Duration(math.Floor(maxWallClockHours * 3600 * float64(time.Second))))
	end := termEnd
	if declared.Before(end) {
		end = declared
	}
	return end.Truncate(time.Second)
}

// Capped is exp brought forward to issuedAt + lifetime when that is
// earlier, in whole seconds rounded down: a ticket lives at most lifetime.
func Capped(exp, issuedAt time.Time, lifetime time.Duration) time.Time {
	if short := issuedAt.Add(lifetime).Truncate(time.Second); short.Before(exp) {
		return short
	}
	return exp
}

// SignerOptions configure a Signer.
type SignerOptions struct {
	// Key signs tickets: Ed25519 (Algorithm "EdDSA") or ECDSA P-256
	// ("ES256"). Required.
	Key crypto.Signer
	// KeyID is the kid of Key in tickets and in the JWKS. Required.
	KeyID string
	// Algorithm is "EdDSA" or "ES256" and must suit Key. Required.
	Algorithm string
	// Issuer is every ticket's iss. Required.
	Issuer string
	// Audience is every ticket's aud; empty means DefaultAudience.
	Audience string
	// Previous are public keys still published in the JWKS after a key
	// rotation, so tickets signed before it verify until they expire. They
	// never sign.
	Previous jwk.Set
}

// Signer signs tickets. It is safe for concurrent use.
type Signer struct {
	key      crypto.Signer
	keyID    string
	alg      jwa.SignatureAlgorithm
	issuer   string
	audience string
	jwks     jwk.Set
	jwksJSON []byte
}

// NewSigner checks opts and returns a Signer.
func NewSigner(opts SignerOptions) (*Signer, error) {
	if opts.Key == nil || opts.KeyID == "" || opts.Issuer == "" {
		return nil, errors.New("ticket signer: key, key id and issuer are required")
	}
	if err := checkKey(opts.Algorithm, opts.Key); err != nil {
		return nil, fmt.Errorf("ticket signer: %w", err)
	}
	alg, _ := jwa.LookupSignatureAlgorithm(opts.Algorithm)
	s := &Signer{key: opts.Key, keyID: opts.KeyID, alg: alg, issuer: opts.Issuer, audience: opts.Audience}
	if s.audience == "" {
		s.audience = DefaultAudience
	}
	set, err := PublicJWKS(opts.KeyID, opts.Algorithm, opts.Key.Public())
	if err != nil {
		return nil, fmt.Errorf("ticket signer: %w", err)
	}
	if opts.Previous != nil {
		for i := range opts.Previous.Len() {
			k, _ := opts.Previous.Key(i)
			if kid, _ := k.KeyID(); kid == opts.KeyID {
				return nil, fmt.Errorf("ticket signer: previous key %q has the signing key's kid", kid)
			}
			if err := set.AddKey(k); err != nil {
				return nil, fmt.Errorf("ticket signer: previous keys: %w", err)
			}
		}
	}
	// The published set must itself be a valid verification set.
	raw, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("ticket signer: %w", err)
	}
	if _, err := verify.LoadJWKS(raw); err != nil {
		return nil, fmt.Errorf("ticket signer: published key set: %w", err)
	}
	s.jwks, s.jwksJSON = set, raw
	return s, nil
}

func checkKey(alg string, key crypto.Signer) error {
	switch alg {
	case "EdDSA":
		if _, ok := key.(ed25519.PrivateKey); !ok {
			return fmt.Errorf("algorithm EdDSA needs an Ed25519 key, got %T", key)
		}
	case "ES256":
		k, ok := key.(*ecdsa.PrivateKey)
		if !ok || k.Curve != elliptic.P256() {
			return fmt.Errorf("algorithm ES256 needs an ECDSA P-256 key, got %T", key)
		}
	default:
		return fmt.Errorf("algorithm %q: tickets are signed with EdDSA (Ed25519) or ES256", alg)
	}
	return nil
}

// PublicJWKS is a one-key JWKS (kid, alg, use "sig") of pub.
func PublicJWKS(keyID, alg string, pub crypto.PublicKey) (jwk.Set, error) {
	pemBytes, err := marshalPublicPEM(pub)
	if err != nil {
		return nil, err
	}
	return verify.KeySetFromPEM(keyID, alg, pemBytes)
}

// Issuer is the signer's iss; Audience its aud.
func (s *Signer) Issuer() string   { return s.issuer }
func (s *Signer) Audience() string { return s.audience }

// KeyID is the kid of the signing key.
func (s *Signer) KeyID() string { return s.keyID }

// JWKS is the published key set (signing key first, then previous keys) as
// JSON, for GET /v1/tickets/jwks. The caller must not modify it.
func (s *Signer) JWKS() []byte { return s.jwksJSON }

// KeySet is the published key set, for building a Verifier.
func (s *Signer) KeySet() jwk.Set { return s.jwks }

// Issue signs c with iss and aud set from the signer. The protected header
// holds exactly alg, kid and typ. Claims that fail validation (empty
// identifiers, a topology whose world size is not nodes × GPUs per node, exp
// not after iat) are refused with an error wrapping ErrClaims: no ticket is
// better than a ticket that grants something undefined.
func (s *Signer) Issue(c Claims) (string, error) {
	c.Issuer, c.Audience = s.issuer, s.audience
	c.IssuedAt, c.Expiry = c.IssuedAt.Truncate(time.Second), c.Expiry.Truncate(time.Second)
	if err := c.validate(); err != nil {
		return "", err
	}
	payload, err := json.Marshal(c.Map())
	if err != nil {
		return "", fmt.Errorf("ticket: %w", err)
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.KeyIDKey, s.keyID); err != nil {
		return "", fmt.Errorf("ticket: %w", err)
	}
	if err := hdr.Set(jws.TypeKey, Type); err != nil {
		return "", fmt.Errorf("ticket: %w", err)
	}
	signed, err := jws.Sign(payload, jws.WithKey(s.alg, s.key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", fmt.Errorf("ticket: sign: %w", err)
	}
	return string(signed), nil
}
