package admission

import (
	"errors"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// Codes produced in Go, before or after the policy. Policy codes come from the
// bundle's METADATA; both sets are listed in docs/codes.md.
const (
	CodeRequestInvalid        = "REQUEST_INVALID"
	CodeRequestTooLarge       = "REQUEST_TOO_LARGE"
	CodeRequestTimeout        = "REQUEST_TIMEOUT"
	CodeContentType           = "REQUEST_CONTENT_TYPE_UNSUPPORTED"
	CodeCallerUnauthenticated = "CALLER_UNAUTHENTICATED"
	CodeDepositorUnauthorized = "DEPOSITOR_UNAUTHENTICATED"
	CodeManifestRequired      = "MANIFEST_REQUIRED"
	CodeManifestEncoding      = "MANIFEST_ENCODING_INVALID"
	CodeManifestSignature     = "MANIFEST_SIGNATURE_INVALID"
	CodeEntitlementInvalid    = "ENTITLEMENT_INVALID"
	CodeEntitlementExpired    = "ENTITLEMENT_EXPIRED"
	// api.CodeEntitlementStale is the policy's freshness code, answered by Go
	// too for an iat further in the future than the leeway.
	CodeEntitlementStale      = "ENTITLEMENT_STALE"
	CodeConfirmationNotFound  = "CONFIRMATION_NOT_FOUND"
	CodeConfirmationInvalid   = "CONFIRMATION_INVALID"
	CodeConfirmationExpired   = "CONFIRMATION_EXPIRED"
	CodeConfirmationDuplicate = "CONFIRMATION_DUPLICATE"
	CodeConfirmationReplayed  = "CONFIRMATION_REPLAYED"
	CodeRunNotFound           = "RUN_NOT_FOUND"
	CodeIdempotencyConflict   = "IDEMPOTENCY_KEY_CONFLICT"
	CodeAdmissionNotFound     = "ADMISSION_NOT_FOUND"
	CodeLedgerUnavailable     = "LEDGER_UNAVAILABLE"
	CodeInternal              = "INTERNAL_ERROR"

	// The booking as one object, decided by Go and the ledger whatever the
	// bundle said (the policy emits the same codes to explain them).
	CodeBookingCapacityExceeded       = "BOOKING_CAPACITY_EXCEEDED"
	CodeBookingReleased               = "BOOKING_RELEASED"
	CodeBookingFactsInvalid           = "BOOKING_FACTS_INVALID"
	CodeRunPastTerm                   = "BUDGET_RUN_PAST_TERM"
	CodeConfirmationCostBelowEstimate = "CONFIRMATION_COST_BELOW_ESTIMATE"

	// Revocations (see docs/security.md).
	CodeConfirmationRevoked = "CONFIRMATION_REVOKED"
	CodeEntitlementRevoked  = "ENTITLEMENT_REVOKED"
	CodeCallerRevoked       = "CALLER_REVOKED"

	// The revoker identity (POST /v1/revocations).
	CodeRevokerUnauthenticated = "REVOKER_UNAUTHENTICATED"
	CodeRevokerUnauthorized    = "REVOKER_UNAUTHORIZED"
)

// tokenCode maps a token verification failure to its stable code. An expired
// token gets the same code the policy uses for the same fact, so a reviewer
// sees one code whichever layer caught it.
//
// tokenCode maps a token verification failure to its stable code: one place,
// so every route reports the same code for the same fault.
func tokenCode(err error) api.Code {
	var ve *verify.Error
	if !errors.As(err, &ve) {
		return api.CodeInternal
	}
	expired := ve.Kind == verify.KindExpired
	switch ve.Purpose {
	case verify.PurposeCaller:
		return api.CodeCallerUnauthenticated
	case verify.PurposeDepositor:
		return api.CodeDepositorUnauthorized
	case verify.PurposeRevoker:
		return api.CodeRevokerUnauthenticated
	case verify.PurposeEntitlement:
		if expired {
			return api.CodeEntitlementExpired
		}
		if ve.Kind == verify.KindIssuedInFuture {
			// Issued further in the future than the leeway: the policy's
			// freshness code (the same boundary; see leewaySeconds).
			return api.CodeEntitlementStale
		}
		return api.CodeEntitlementInvalid
	case verify.PurposeConfirmation:
		if expired {
			return api.CodeConfirmationExpired
		}
		return api.CodeConfirmationInvalid
	case verify.PurposeEvals:
		return api.CodeEvalReportInvalid
	}
	return api.CodeInternal
}
