package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
)

// Planner is a decider that proposes layouts (policy.Engine.Plan).
type Planner interface {
	Plan(ctx context.Context, manifest map[string]any, build policy.PlanInput, admitted func(policy.Decision) bool) (policy.PlanResult, error)
}

// Plan answers POST /v1/plans: the layouts the active bundle would admit
// for the caller's manifest on the caller's booking, at the booking's live
// usage. It verifies what an admission verifies before its decision (the
// manifest signature and schema, the entitlement, the booking and
// entitlement unrevoked, the booking bound to no other account) and takes
// an evaluation slot like an admission; it reads the ledger only: nothing
// is consumed, reserved or recorded, and no confirmation is needed.
//
// Each proposed manifest is judged by the full decision under the input a
// train.create of it would have, but for what the caller has yet to
// obtain for it: its own signature (the input says verified with the key
// that signed the manifest the plan started from) and the confirmation of
// its cost (no confirmation in the input; a decision whose only
// violations are the confirmation gate's admits the plan).
func (s *Service) Plan(ctx context.Context, caller Caller, req api.PlanRequest) Outcome {
	now := s.opts.Now()
	switch {
	case !reID.MatchString(req.BookingID):
		return fail(api.CodeRequestInvalid, "booking_id: 1-128 characters of [A-Za-z0-9._:-]")
	case req.EntitlementToken == "":
		return fail(api.CodeRequestInvalid, "entitlement_token is required")
	case len(req.Manifest) == 0:
		return fail(api.CodeManifestRequired, "a plan needs the manifest bytes")
	case len(req.Manifest) > manifest.MaxBytes:
		return fail(api.CodeManifestTooLarge, fmt.Sprintf("manifest larger than %d bytes", manifest.MaxBytes))
	}
	if s.limit.saturated() {
		return overloaded(true)
	}
	keyID, err := s.opts.Manifests.Verify(req.Manifest, req.ManifestSignature)
	if err != nil {
		o := denied(api.CodeManifestSignature, "the manifest signature does not verify with any pinned signer key")
		o.Cause = err
		return o
	}
	doc, err := manifest.Parse(req.Manifest)
	if err != nil {
		var me *manifest.Error
		if errors.As(err, &me) {
			return fail(me.Code, me.Error())
		}
		return fail(api.CodeInternal, "manifest schema unavailable")
	}
	ent, err := s.opts.Entitlement.Verify([]byte(req.EntitlementToken), now)
	if err != nil {
		return tokenDenied(err, "entitlement")
	}
	if pr := ledger.IDProblem(ent.JTI); pr != "" {
		return denied(api.CodeEntitlementInvalid, "entitlement jti "+pr)
	}
	if o, done := s.revoked(ctx, ledger.RevokeBooking, req.BookingID); done {
		return o
	}
	if o, done := s.revoked(ctx, ledger.RevokeEntitlement, ent.JTI); done {
		return o
	}
	usage, err := s.opts.Ledger.BookingUsage(ctx, req.BookingID, now)
	if err != nil {
		return s.ledgerFault("booking usage", err)
	}
	if usage.Account != "" && usage.Account != caller.Account {
		return denied(api.CodeBookingAccountMismatch, "this booking id is bound to another account; nothing was read or written")
	}
	decider := s.opts.Policy()
	if decider == nil {
		return fail(api.CodePolicyNotReady, "no verified policy bundle is active")
	}
	planner, ok := decider.(Planner)
	if !ok {
		return fail(api.CodePolicyNotReady, "the active bundle proposes no layouts")
	}
	if !s.limit.acquire(ctx) {
		return overloaded(false)
	}
	defer s.limit.release()
	sig := VerifiedBy(keyID)
	build := func(m map[string]any) (map[string]any, error) {
		raw, err := json.Marshal(m)
		if err != nil {
			return nil, err
		}
		parsed, err := manifest.Parse(raw)
		if err != nil {
			return nil, err
		}
		digest := manifest.Digest(raw)
		in := Input{
			Now:    now,
			Leeway: Leeway{Entitlement: leeway(s.opts.Entitlement), Confirmation: leeway(s.opts.Confirmation)},
			Request: api.AdmissionRequest{Action: api.TrainCreate, BookingID: req.BookingID,
				IdempotencyKey: "plan", EntitlementToken: req.EntitlementToken},
			RequestDigest:  digest,
			Caller:         caller,
			ManifestDigest: digest,
			Manifest:       parsed,
			Verification: Verification{Caller: VerifiedBy(caller.KeyID), ManifestSignature: &sig,
				Entitlement: VerifiedBy(ent.KeyID)},
			Entitlement: ent.Raw,
			Ledger:      LedgerFacts{Booking: BookingFactsOf(caller.Account, usage)},
		}
		return in.Document(), nil
	}
	res, err := planner.Plan(ctx, doc, build, admittedButForConfirmation)
	if err != nil {
		code := api.CodePolicyEvaluationFailed
		var pe *policy.Error
		if errors.As(err, &pe) {
			code = pe.Code
		}
		return fail(code, "the policy produced no usable plan")
	}
	return Outcome{Status: 200, Extra: res}
}

// admittedButForConfirmation: the decision allows, or denies only by the
// confirmation gate (the proposed manifest's cost is not confirmed yet).
func admittedButForConfirmation(d policy.Decision) bool {
	for _, v := range d.Violations {
		if v.Gate != "confirmation" {
			return false
		}
	}
	return true
}
