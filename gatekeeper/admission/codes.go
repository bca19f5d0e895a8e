package admission

import (
	"errors"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// tokenCode maps a token verification failure to its stable code: one
// place, so every route reports the same code for the same fault. An expired
// token gets the same code the policy uses for the same fact, so a reviewer
// sees one code whichever layer caught it.
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
	case verify.PurposeScheduler:
		return api.CodeSchedulerUnauthenticated
	case verify.PurposeEntitlement:
		if expired {
			return api.CodeEntitlementExpired
		}
		if ve.Kind == verify.KindIssuedInFuture {
			// Issued further in the future than the leeway: the policy's
			// freshness code (the same boundary; see leeway).
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
