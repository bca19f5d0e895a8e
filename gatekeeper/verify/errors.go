package verify

import (
	"errors"
	"strconv"
)

// Purpose names what a verifier checks. A key configured for one purpose
// never verifies another purpose's token (docs/architecture.md §2).
type Purpose string

// The purposes. Token purposes are accepted by NewTokenVerifier;
// PurposeManifest is used by ManifestVerifier.
const (
	// PurposeCaller is the caller's bearer JWT from its identity provider.
	PurposeCaller Purpose = "caller"
	// PurposeDepositor is the confirmation authority's own bearer JWT when it
	// deposits a confirmation (POST /v1/confirmations).
	PurposeDepositor Purpose = "depositor"
	// PurposeRevoker is the entitlement issuer's revocation identity: the
	// bearer JWT that may revoke entitlements, bookings and caller keys
	// (POST /v1/revocations). Its own key set, never a caller's or the
	// confirmation authority's.
	PurposeRevoker Purpose = "revoker"
	// PurposeScheduler is a scheduler's identity (a Slurm controller's
	// prolog, a Ray job submitter): the bearer JWT of the online ticket
	// check that binds a run to one job (POST /v1/tickets/verify). Its own
	// key set, never a caller's.
	PurposeScheduler Purpose = "scheduler"
	// PurposeEntitlement is the entitlement token from the canonical backend.
	PurposeEntitlement Purpose = "entitlement"
	// PurposeConfirmation is the confirmation token from the confirmation
	// authority.
	PurposeConfirmation Purpose = "confirmation"
	// PurposeEvals is a token of the eval authority: an eval report that
	// ends a stage, or a 150M-token ladder decision on a custom dataset.
	PurposeEvals Purpose = "evals"
	// PurposeManifest is the detached signature over manifest bytes.
	PurposeManifest Purpose = "manifest"
	// PurposeTicket is the admission ticket itogate itself signs on an
	// allowed train.create (package ticket), verified where workloads are
	// created (the Kubernetes webhook, `itogate ticket verify`).
	PurposeTicket Purpose = "ticket"
)

func (p Purpose) isToken() bool {
	switch p {
	case PurposeCaller, PurposeDepositor, PurposeRevoker, PurposeScheduler, PurposeEntitlement, PurposeConfirmation, PurposeTicket, PurposeEvals:
		return true
	}
	return false
}

// Kind classifies a verification failure. The server maps each
// (Purpose, Kind) pair to one stable deny code in one place.
type Kind int

// The kinds of verification failure. The zero Kind is never returned.
const (
	_ Kind = iota
	// KindTooLarge: the token or signature is larger than allowed; it was not
	// parsed.
	KindTooLarge
	// KindMalformed: not a compact JWS (JSON serialization, JWE, bad
	// base64url, bad JSON, duplicate keys), or a signature string that is not
	// base64.
	KindMalformed
	// KindHeader: a forbidden or unexpected JOSE header: alg "none" or HMAC,
	// an alg other than the key's configured alg, embedded or remote keys
	// (jwk, jku, x5u, x5c), crit, b64, or the wrong typ.
	KindHeader
	// KindUnknownKey: the token has no kid, or its kid is not in the key set
	// of this purpose.
	KindUnknownKey
	// KindSignature: the signature does not verify with the resolved key (or,
	// for manifests, with any pinned signer).
	KindSignature
	// KindExpired: now is at or after exp + leeway (exp alone with
	// TokenOptions.StrictExpiry).
	KindExpired
	// KindNotYetValid: now is before nbf - leeway.
	KindNotYetValid
	// KindIssuedInFuture: iat is after now + leeway.
	KindIssuedInFuture
	// KindIssuer: iss differs from the configured issuer.
	KindIssuer
	// KindAudience: aud does not contain the configured audience.
	KindAudience
	// KindClaims: a required claim is missing or has the wrong JSON type, or
	// the claims are not a JSON object.
	KindClaims
)

var kindNames = [...]string{
	KindTooLarge:       "too_large",
	KindMalformed:      "malformed",
	KindHeader:         "header",
	KindUnknownKey:     "unknown_key",
	KindSignature:      "signature",
	KindExpired:        "expired",
	KindNotYetValid:    "not_yet_valid",
	KindIssuedInFuture: "issued_in_future",
	KindIssuer:         "issuer",
	KindAudience:       "audience",
	KindClaims:         "claims",
}

// String returns the kind's snake_case name, e.g. "unknown_key".
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Error is every verification failure returned by TokenVerifier.Verify and
// ManifestVerifier.Verify. Its message names the purpose, the kind and a
// short fixed reason; it never contains token, signature or key bytes, nor
// any string taken from the token.
type Error struct {
	Purpose Purpose
	Kind    Kind
	// Err is the reason. Its text is fixed by this package.
	Err error
}

// Error implements error: "<purpose> <token|signature>: <kind>: <reason>".
func (e *Error) Error() string {
	what := " token"
	if e.Purpose == PurposeManifest {
		what = " signature"
	}
	msg := string(e.Purpose) + what + ": " + e.Kind.String()
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the reason.
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of the *Error in err's chain, and false when err
// is not (or does not wrap) a verification error.
func KindOf(err error) (Kind, bool) {
	var ve *Error
	if errors.As(err, &ve) {
		return ve.Kind, true
	}
	return 0, false
}

func fail(p Purpose, k Kind, reason string) *Error {
	return &Error{Purpose: p, Kind: k, Err: errors.New(reason)}
}
