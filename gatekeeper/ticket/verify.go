package ticket

import (
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/sigstore/sigstore/pkg/cryptoutils"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

func marshalPublicPEM(pub crypto.PublicKey) ([]byte, error) {
	return cryptoutils.MarshalPublicKeyToPEM(pub)
}

// VerifierOptions configure a Verifier.
type VerifierOptions struct {
	// Issuer is the required iss (the issuing itogate's tickets.issuer).
	Issuer string
	// Audience is the required aud; empty means DefaultAudience.
	Audience string
	// Keys are the ticket public keys (GET /v1/tickets/jwks, or a PEM made
	// into a set with verify.KeySetFromPEM).
	Keys jwk.Set
	// Leeway is the clock skew tolerated on iat; 0 means
	// verify.DefaultLeeway. exp gets none: a ticket is expired from its exp
	// on the verifier's clock, so it verifies offline for at most its
	// lifetime (exp − iat) whatever the leeway.
	Leeway time.Duration
	// CacheEntries: see verify.TokenOptions (verify.CacheEntriesFor
	// (verify.PurposeTicket) for a long-running verifier, 0 for one-shot).
	CacheEntries int
}

// Verifier verifies tickets offline. It is safe for concurrent use.
type Verifier struct {
	tv *verify.TokenVerifier
}

// NewVerifier returns a Verifier for opts.
func NewVerifier(opts VerifierOptions) (*Verifier, error) {
	aud := opts.Audience
	if aud == "" {
		aud = DefaultAudience
	}
	tv, err := verify.NewTokenVerifier(verify.TokenOptions{
		Purpose: verify.PurposeTicket, Issuer: opts.Issuer, Audience: aud, Type: Type,
		Keys: opts.Keys, Leeway: opts.Leeway, StrictExpiry: true, RequireJTI: true, CacheEntries: opts.CacheEntries,
	})
	if err != nil {
		return nil, err
	}
	return &Verifier{tv: tv}, nil
}

// Verify checks raw at now: signature, typ, iss, aud, exp (expired from
// exp on, no leeway) and iat (with leeway), then that every ticket claim is present with its type. Every
// failure is a *verify.Error with PurposeTicket; missing or mistyped ticket
// claims are KindClaims.
func (v *Verifier) Verify(raw []byte, now time.Time) (Claims, error) {
	vc, err := v.tv.Verify(raw, now)
	if err != nil {
		return Claims{}, err
	}
	c, err := FromVerified(vc)
	if err != nil {
		return Claims{}, &verify.Error{Purpose: verify.PurposeTicket, Kind: verify.KindClaims, Err: err}
	}
	return c, nil
}

// VerifyAllowExpired is Verify that also accepts a ticket past its exp,
// reporting expired: every other check runs as Verify runs it (the
// signature with the configured keys, typ, iss, aud, iat and every ticket
// claim), against the instant one second before the ticket's exp when now
// is past it. An expired ticket still proves which run itogate admitted:
// the webhook lets the controller of a bound workload re-create Pods with
// it while the run may work, and the renewal reads the run's topology
// from the stored first ticket.
func (v *Verifier) VerifyAllowExpired(raw []byte, now time.Time) (c Claims, expired bool, err error) {
	c, err = v.Verify(raw, now)
	if k, ok := verify.KindOf(err); !ok || k != verify.KindExpired {
		return c, false, err
	}
	exp, ok := payloadExp(raw)
	if !ok {
		return Claims{}, false, err
	}
	// The signature covers exp: a ticket whose exp was changed fails here.
	c, err = v.Verify(raw, exp.Add(-time.Second))
	if err != nil {
		return Claims{}, false, err
	}
	return c, true, nil
}

// payloadExp reads exp from a compact JWS's payload without verifying it;
// VerifyAllowExpired verifies the token again at that time.
func payloadExp(raw []byte) (time.Time, bool) {
	parts := strings.Split(string(raw), ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var p struct {
		Exp *int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &p) != nil || p.Exp == nil {
		return time.Time{}, false
	}
	return time.Unix(*p.Exp, 0), true
}

// FromVerified reads the ticket claims out of verified claims. Missing or
// mistyped claims, and claims Issue would refuse, are an error wrapping
// ErrClaims.
func FromVerified(vc *verify.Claims) (Claims, error) {
	c := Claims{
		Issuer: vc.Issuer, Account: vc.Subject, ID: vc.JTI,
		IssuedAt: vc.IssuedAt, Expiry: vc.Expiry,
	}
	if len(vc.Audience) > 0 {
		c.Audience = vc.Audience[0]
	}
	var errs []error
	str := func(name string, dst *string) {
		s, ok := vc.Raw[name].(string)
		if !ok {
			errs = append(errs, fmt.Errorf("%s missing or not a string", name))
		}
		*dst = s
	}
	num := func(name string, dst *int64) {
		n, ok := vc.Raw[name].(int64)
		if !ok {
			errs = append(errs, fmt.Errorf("%s missing or not an integer", name))
		}
		*dst = n
	}
	str("run_id", &c.RunID)
	str("booking_id", &c.BookingID)
	str("action", &c.Action)
	str("manifest_digest", &c.ManifestDigest)
	str("gpu_type", &c.GPUType)
	str("region", &c.Region)
	str("bundle_revision", &c.BundleRevision)
	num("world_size", &c.WorldSize)
	num("nodes", &c.Nodes)
	num("gpus_per_node", &c.GPUsPerNode)
	if err := errors.Join(errs...); err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrClaims, err)
	}
	if err := c.validate(); err != nil {
		return Claims{}, err
	}
	return c, nil
}

// Expect is what a runtime expects of a ticket (`itogate ticket verify
// --run-id ...`). Empty strings and zero numbers are not checked; every
// other field must equal its claim.
type Expect struct {
	Account, RunID, BookingID, ManifestDigest, GPUType, Region string
	// Action defaults to train.create when empty: only that admission
	// creates workloads.
	Action                        string
	WorldSize, Nodes, GPUsPerNode int64
}

// MismatchError names the claim a ticket failed an expectation on. Its
// message holds the claim name only, never values from the ticket.
type MismatchError struct{ Claim string }

func (e *MismatchError) Error() string {
	return "ticket " + e.Claim + " does not match the expectation"
}

// Check reports the first expectation c does not meet, as a *MismatchError,
// in the order of the Expect fields.
func (c Claims) Check(e Expect) error {
	action := e.Action
	if action == "" {
		action = string(api.TrainCreate)
	}
	strs := []struct{ name, want, got string }{
		{"sub", e.Account, c.Account}, {"run_id", e.RunID, c.RunID}, {"booking_id", e.BookingID, c.BookingID},
		{"manifest_digest", e.ManifestDigest, c.ManifestDigest}, {"gpu_type", e.GPUType, c.GPUType},
		{"region", e.Region, c.Region}, {"action", action, c.Action},
	}
	for _, s := range strs {
		if s.want != "" && s.want != s.got {
			return &MismatchError{Claim: s.name}
		}
	}
	nums := []struct {
		name      string
		want, got int64
	}{{"world_size", e.WorldSize, c.WorldSize}, {"nodes", e.Nodes, c.Nodes}, {"gpus_per_node", e.GPUsPerNode, c.GPUsPerNode}}
	for _, n := range nums {
		if n.want != 0 && n.want != n.got {
			return &MismatchError{Claim: n.name}
		}
	}
	return nil
}
