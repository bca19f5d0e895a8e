package admission

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/booking"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// admit runs the stages of one admission in order. Each stage either
// returns its product or ends the admission with an Outcome (done == true);
// data flows one way, and a stage never runs after one that ended it.
//
//	precheck  request shape, digests, exact-retry replay, overload shedding
//	verify    manifest signature and schema, entitlement, confirmation, run
//	facts     the policy input document (facts only, now passed in)
//	decide    the bundle's decision, with a bounded evaluation slot
//	commit    one ledger transaction: consume, reserve, record
//
// refused and committed turn a decision or a ledger answer into the Outcome.
func (s *Service) admit(ctx context.Context, caller Caller, req Request, tr *trace) Outcome {
	p := &pending{caller: caller, req: req, tr: tr}
	if o, done := s.precheck(ctx, p); done {
		return o
	}
	if o, done := s.verify(ctx, p); done {
		return o
	}
	s.facts(p)
	if o, done := s.decide(ctx, p); done {
		return o
	}
	if !p.decision.Allow {
		if o, done := s.halt(ctx, p); done {
			return o
		}
		return s.refused(ctx, p)
	}
	return s.commit(ctx, p)
}

// pending is one admission between stages: what each stage established for
// the next. It lives for one request only.
type pending struct {
	caller Caller
	req    Request
	tr     *trace
	now    time.Time

	manifestDigest string
	requestDigest  string
	keySeen        bool // the idempotency key is stored for another request

	manifest     map[string]any // parsed manifest document (train.create, train.stage.advance)
	verified     Verification   // input.verification
	entitlement  *verify.Claims
	confirmation *verify.Claims
	consumed     bool         // the stored confirmation is already consumed
	evalReports  []EvalReport // input.eval_reports: verified eval-authority tokens
	ledgerRun    *RunFacts    // input.ledger.run (advance, restart)
	runStage     string       // the run's stage as read (advance: the stage it leaves)
	halted       *ledger.Halt // the halt this deny recorded on the run (a failed gate)

	// run is what a train.create takes from its booking, computed in Go
	// from the verified manifest and entitlement; runErr says why it could
	// not be (the policy explains such a manifest first; commit refuses).
	run    booking.Run
	runErr error
	usage  ledger.BookingUsage // the booking's live runs at now (train.create, train.stage.advance)
	target ledger.RunRecord    // the run a cancel, cleanup, stage advance or restart acts on
	// stageGPUs is the world size of the stage an advance enters (commit)
	stageGPUs int

	input    map[string]any
	decider  Decider
	decision policy.Decision
}

// precheck validates the request's shape, computes its digests and answers
// an exact retry of an admitted request with the stored allow, whatever
// happened to its tokens since: nothing new is verified, evaluated or
// consumed. It sheds load before any verification when the evaluation queue
// is full.
func (s *Service) precheck(ctx context.Context, p *pending) (Outcome, bool) {
	req := p.req
	p.tr.keyIDs["caller"] = p.caller.KeyID
	if err := validate(req); err != nil {
		return fail(api.CodeRequestInvalid, err.Error()), true
	}
	p.now = s.opts.Now()

	if req.Action.CarriesManifest() {
		if len(req.Manifest) == 0 {
			return fail(api.CodeManifestRequired, string(req.Action)+" needs the manifest bytes"), true
		}
		if len(req.Manifest) > manifest.MaxBytes {
			return fail(api.CodeManifestTooLarge,
				fmt.Sprintf("manifest larger than %d bytes", manifest.MaxBytes)), true
		}
		p.manifestDigest = manifest.Digest(req.Manifest)
	}
	p.requestDigest = RequestDigest(p.caller, req, p.manifestDigest)
	p.tr.requestDigest, p.tr.manifestDigest = p.requestDigest, p.manifestDigest

	prior, err := s.opts.Ledger.Admission(ctx, p.caller.Account, req.IdempotencyKey)
	switch {
	case err == nil && prior.RequestDigest == p.requestDigest:
		return replayed(prior), true
	case err != nil && !errors.Is(err, ledger.ErrNotFound):
		return s.ledgerFault("admission lookup", err), true
	}
	p.keySeen = err == nil

	// Overloaded: every evaluation slot busy and the wait queue full. Shed
	// now, before any verification, so refusing costs next to nothing and
	// the CPU stays with the admissions already admitted to the queue.
	if s.limit.saturated() {
		return overloaded(true), true
	}
	return Outcome{}, false
}

// verify establishes the cryptographic and stored facts: the manifest
// signature over the exact bytes and then its schema, the entitlement, the
// deposited confirmation (verified again now), and for cancel/cleanup the run
// it acts on. Each failure is a coded deny.
func (s *Service) verify(ctx context.Context, p *pending) (Outcome, bool) {
	req, tr := p.req, p.tr
	p.verified = Verification{Caller: VerifiedBy(p.caller.KeyID)}
	p.manifest = map[string]any{}
	if req.Action.CarriesManifest() {
		keyID, err := s.opts.Manifests.Verify(req.Manifest, req.ManifestSignature)
		if err != nil {
			o := denied(api.CodeManifestSignature, "the manifest signature does not verify with any pinned signer key")
			o.Cause = err
			return o, true
		}
		sig := VerifiedBy(keyID)
		p.verified.ManifestSignature = &sig
		tr.keyIDs["manifest"] = keyID
		p.manifest, err = manifest.Parse(req.Manifest)
		if err != nil {
			var me *manifest.Error
			if errors.As(err, &me) {
				return fail(me.Code, me.Error()), true
			}
			return fail(api.CodeInternal, "manifest schema unavailable"), true
		}
	}

	ent, err := s.opts.Entitlement.Verify([]byte(req.EntitlementToken), p.now)
	if err != nil {
		return tokenDenied(err, "entitlement"), true
	}
	// The ledger records and revokes entitlements by jti: one it cannot
	// hold (over-long, NUL) is the token's fault, alike on every backend.
	if pr := ledger.IDProblem(ent.JTI); pr != "" {
		return denied(api.CodeEntitlementInvalid, "entitlement jti "+pr), true
	}
	p.entitlement = ent
	p.verified.Entitlement = VerifiedBy(ent.KeyID)
	tr.keyIDs["entitlement"], tr.jtis["entitlement"] = ent.KeyID, ent.JTI
	// What is no teardown (a create, a stage advance, a restart) needs the
	// booking and the entitlement it carries unrevoked; the commit checks
	// again (ledger.RevocationSubjects).
	if !req.Action.Teardown() {
		if o, done := s.revoked(ctx, ledger.RevokeBooking, req.BookingID); done {
			return o, true
		}
		if o, done := s.revoked(ctx, ledger.RevokeEntitlement, ent.JTI); done {
			return o, true
		}
	}
	// An action on the booking itself (a create, a release) needs it
	// unbound or bound to this account; an action on a run finds the run
	// this account's (below). The commit checks the binding again.
	if !req.Action.ActsOnRun() {
		u, err := s.opts.Ledger.BookingUsage(ctx, req.BookingID, p.now)
		if err != nil {
			return s.ledgerFault("booking usage", err), true
		}
		if u.Account != "" && u.Account != p.caller.Account {
			return denied(api.CodeBookingAccountMismatch,
				"this booking id is bound to another account; nothing was written"), true
		}
		p.usage = u
	}
	if req.Action.Effect() == api.EffectCreateRun {
		p.run, p.runErr = booking.ForCreate(p.manifest, ent.Raw, p.now)
	}

	// The reference resolves to a stored token, verified again now.
	conf, err := s.opts.Ledger.Confirmation(ctx, req.ConfirmationRef)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return denied(api.CodeConfirmationNotFound, "no confirmation is deposited under this reference"), true
	case err != nil:
		return s.ledgerFault("confirmation lookup", err), true
	}
	p.consumed = conf.State == ledger.ConfirmationConsumed
	if len(conf.Token) == 0 {
		// Swept after expiry: only the tombstone is left.
		if p.consumed {
			return denied(api.CodeConfirmationReplayed, "this confirmation was already used"), true
		}
		return denied(api.CodeConfirmationExpired, "this confirmation expired"), true
	}
	cc, err := s.opts.Confirmation.Verify(conf.Token, p.now)
	if err != nil {
		return tokenDenied(err, "confirmation"), true
	}
	p.confirmation = cc
	p.verified.Confirmation = VerifiedBy(cc.KeyID)
	tr.keyIDs["confirmation"], tr.jtis["confirmation"] = cc.KeyID, cc.JTI
	if o, done := s.revoked(ctx, ledger.RevokeConfirmation, cc.JTI); done {
		return o, true
	}

	// Lifecycle actions act on a run this account was admitted for, on the
	// booking the request names: a confirmation and entitlement for another
	// booking of the same account never reach a run elsewhere. Another
	// account's run and a run on another booking answer exactly like an
	// unknown run id, so the answer reveals nothing about them.
	if req.Action.ActsOnRun() {
		run, err := s.opts.Ledger.Run(ctx, req.RunID)
		switch {
		case errors.Is(err, ledger.ErrNotFound) ||
			(err == nil && (run.Account != p.caller.Account || run.BookingID != req.BookingID)):
			return denied(api.CodeRunNotFound, "no run with this id was admitted for this account on this booking"), true
		case err != nil:
			return s.ledgerFault("run lookup", err), true
		}
		rec, err := s.opts.Ledger.RunRecord(ctx, req.RunID)
		switch {
		case err == nil:
			p.target = rec
		case !errors.Is(err, ledger.ErrNotFound):
			return s.ledgerFault("run lookup", err), true
		}
		// A stage larger than the run grows it by GPUs its booking has
		// free (the policy's input.ledger.booking; the commit decides it
		// again): the usage of the run's own booking, read once the run is
		// found this account's on it.
		if spec, _ := req.Action.Spec(); spec.Stage {
			if p.usage, err = s.opts.Ledger.BookingUsage(ctx, req.BookingID, p.now); err != nil {
				return s.ledgerFault("booking usage", err), true
			}
		}
		// The run's state decides what it may do (ledger.RunRecord.May):
		// a run revoked with its booking or entitlement is refused here
		// with the revocation's code, as a create is, and so is one whose
		// stage's eval report is overdue (EVAL_REPORT_OVERDUE: a ledger
		// fact the policy has no rule for); a halted or ended one is the
		// policy's fact (input.ledger.run.state). The commit asks May
		// again.
		if err == nil {
			mayErr := rec.May(req.Action, p.now)
			if re, ok := errors.AsType[*ledger.RevocationError](mayErr); ok {
				return revokedOutcome(re.Revocation), true
			}
			if oe, ok := errors.AsType[*ledger.ReportOverdueError](mayErr); ok {
				return denied(api.CodeEvalReportOverdue, overdueMessage(oe)), true
			}
		}
		s.runFacts(p, run)
	}
	var o Outcome
	var done bool
	if p.evalReports, o, done = s.verifyEvalReports(req.EvalReports, p.now, tr); done {
		return o, true
	}
	return Outcome{}, false
}

// facts builds the policy input document (Input.Document) from what
// verify established. It holds facts only; `now` comes in here and is
// never read in Rego.
func (s *Service) facts(p *pending) {
	in := Input{
		Now:            p.now,
		Leeway:         Leeway{Entitlement: leeway(s.opts.Entitlement), Confirmation: leeway(s.opts.Confirmation)},
		Request:        p.req,
		RequestDigest:  p.requestDigest,
		Caller:         p.caller,
		ManifestDigest: p.manifestDigest,
		Manifest:       p.manifest,
		Verification:   p.verified,
		Entitlement:    p.entitlement.Raw,
		Confirmation:   p.confirmation.Raw,
		EvalReports:    p.evalReports,
		Ledger:         LedgerFacts{ConfirmationConsumed: p.consumed, SeenKey: p.keySeen, Run: p.ledgerRun},
	}
	if spec, _ := p.req.Action.Spec(); spec.Effect == api.EffectCreateRun || spec.Stage {
		in.Ledger.Booking = BookingFactsOf(p.caller.Account, p.usage)
	}
	p.input = in.Document()
}

// decide evaluates the active bundle on the input within an evaluation slot.
// No bundle, no slot or no usable decision is a deny; the shadow bundle, if
// any, sees the same input.
func (s *Service) decide(ctx context.Context, p *pending) (Outcome, bool) {
	decider := s.opts.Policy()
	if decider == nil {
		return fail(api.CodePolicyNotReady, "no verified policy bundle is active"), true
	}
	if !s.limit.acquire(ctx) {
		return overloaded(false), true
	}
	p.decider = decider
	// the training facts of the bundle that decides, from its own tables
	p.input = WithFacts(p.input, FactsOf(decider))
	p.tr.input, p.tr.decider = p.input, decider
	dec, err := func() (policy.Decision, error) {
		defer s.limit.release() // also when Decide panics (the server recovers)
		return decider.Decide(ctx, p.input)
	}()
	if err != nil {
		code := api.CodePolicyEvaluationFailed
		var pe *policy.Error
		if errors.As(err, &pe) {
			code = pe.Code
		}
		// A runtime error can quote the input it failed on (a manifest
		// string that holds a credential): redacted like the decision log.
		s.opts.Logger.Error("policy evaluation failed", "decision_id", p.tr.decisionID, "code", code,
			"err", decisionlog.Redact(err.Error()))
		out := fail(code, "the policy produced no usable decision; denied")
		out.Data = &api.AdmissionData{Decision: "deny", DecisionID: p.tr.decisionID, Action: p.req.Action,
			BookingID: p.req.BookingID, ManifestDigest: p.manifestDigest, IdempotencyKey: p.req.IdempotencyKey,
			State: api.StateDenied, BundleRevision: decider.Revision()}
		return out, true
	}
	p.decision = dec
	p.tr.decision = &p.decision
	s.shadow(ctx, p.tr, dec)
	return Outcome{}, false
}

// data is the response data every outcome after the policy starts from.
func (p *pending) data() *api.AdmissionData {
	return &api.AdmissionData{
		DecisionID: p.tr.decisionID, Action: p.req.Action, BookingID: p.req.BookingID,
		ManifestDigest: p.manifestDigest, IdempotencyKey: p.req.IdempotencyKey,
		BundleRevision: p.decider.Revision(), Warnings: p.decision.Warnings, Estimates: p.decision.Estimates,
	}
}

// refused turns a policy deny into its Outcome: 403, or 409 when the key is
// bound to another request. A deny that is only "confirmation replayed" by
// this very request's own earlier allow is that allow, replayed.
func (s *Service) refused(ctx context.Context, p *pending) Outcome {
	dec := p.decision
	if onlyReplayed(dec.Violations) {
		if o, ok := s.sameRequestWon(ctx, p.caller, p.req.IdempotencyKey, p.requestDigest); ok {
			return o
		}
	}
	data := p.data()
	data.Decision, data.State = "deny", api.StateDenied
	// The lead code and so the status follow api.Lead: a key bound to
	// another request makes the answer 409 IDEMPOTENCY_KEY_CONFLICT, else
	// the first violation's 403; every violation stays listed.
	o := deny("denied by policy: ", dec.Violations, data)
	if p.halted != nil {
		o.Notice = haltedMessage(p.halted.RunHalt)
	}
	return o
}

// commit records an allowed admission: one transaction consumes the
// confirmation, reserves the idempotency key and writes the admission (and
// for train.create a new run). The ledger re-checks under the transaction,
// so a race lost here is a deny, never a second allow.
func (s *Service) commit(ctx context.Context, p *pending) Outcome {
	req := p.req
	spec, _ := req.Action.Spec()
	runID := req.RunID
	if spec.Effect == api.EffectCreateRun {
		runID = ledger.NewRunID()
	}
	rec := ledger.Admission{
		Account: p.caller.Account, IdempotencyKey: req.IdempotencyKey, RequestDigest: p.requestDigest,
		DecisionID: p.tr.decisionID, RunID: runID, Action: req.Action, BookingID: req.BookingID,
		ManifestDigest: p.manifestDigest, ConfirmationRef: req.ConfirmationRef, ConfirmationJTI: p.confirmation.JTI,
		BundleRevision: p.decider.Revision(), State: spec.State, CreatedAt: p.now,
		EntitlementJTI: p.entitlement.JTI, CallerKeyID: p.caller.KeyID,
	}
	if req.Action == api.TrainCreate {
		// Whatever the bundle decided: the run's facts must be computable
		// and it must end within the term (the policy says so first).
		if p.runErr != nil {
			return p.refusedAtCommit(api.CodeBookingFactsInvalid,
				"the run's GPUs, hours or price could not be computed from the manifest and entitlement", "booking")
		}
		if p.run.End.After(p.run.TermEnd) {
			return p.refusedAtCommit(api.CodeRunPastTerm,
				"the run's declared wall-clock end is after the booking term", "budget")
		}
		// The cost pays for the GPU-hours the training facts expect the
		// run to lose to failures; facts without them (none computed, or
		// a run whose lost work is unknown) are refused.
		lost, ok := trainfacts.LostCentiGPUHours(p.input)
		priced, err := p.run.WithLostWork(lost)
		if !ok || err != nil {
			return p.refusedAtCommit(api.CodeBookingFactsInvalid,
				"the run's expected lost work could not be computed from the training facts", "booking")
		}
		rec.GPUs, rec.BookedGPUs = p.run.GPUs, p.run.BookedGPUs
		rec.LiveUntil = p.run.End.Add(booking.Grace(p.decision.Estimates))
		rec.CostMicroUSD = booking.EstimateMicroUSD(priced.ComputeMicroUSD, p.decision.Estimates)
		rec.Plan = runPlan(p.manifest, p.run, p.now, p.decision.Estimates)
	}
	switch {
	case spec.Effect == api.EffectCreateRun:
		rec.Stage = firstStage(p.manifest)
	case spec.Stage:
		rec.Stage, rec.FromStage = req.Stage, p.runStage
		// The stage's world size, from its effective manifest, whatever
		// the bundle decided: a run holding fewer grows to it in the
		// commit when the booking has the difference free.
		gpus, err := booking.WorldSize(trainfacts.StageManifest(p.manifest, req.Stage))
		if err != nil {
			return p.refusedAtCommit(api.CodeBookingFactsInvalid,
				"the stage's GPUs could not be computed from its effective manifest", "booking")
		}
		rec.StageGPUs, p.stageGPUs = gpus, gpus
	}
	if spec.Effect == api.EffectCreateRun || spec.Stage {
		// the entered stage's report deadline, from the decision
		rec.ReportDue = reportDue(p.now, p.decision.Estimates)
	}
	if spec.CheckpointStep {
		rec.CheckpointStep = req.Step()
		rec.RestartBudget = restartBudget(p.decision.Estimates)
	}
	if spec.Effect == api.EffectCreateRun && s.opts.Tickets != nil {
		// Signed before the commit and stored by it, so the caller, a
		// replay and a status lookup all get this very ticket.
		tc, err := ticketClaims(rec, p.manifest, p.entitlement.Raw, s.ticketLifetime())
		if err == nil {
			rec.Ticket, err = s.opts.Tickets.Issue(tc)
		}
		if err != nil {
			s.opts.Logger.Error("ticket not signed", "decision_id", rec.DecisionID, "err", err)
			data := p.data()
			data.Decision, data.State = "deny", api.StateDenied
			return Outcome{Code: api.CodeTicketUnavailable,
				Message: "allowed by policy, but the admission ticket could not be signed; denied, nothing was consumed", Data: data}
		}
	}
	// Production: the allow's write-ahead line is durable before the
	// commit, or nothing is committed (docs/security.md).
	if o, done := s.writeAhead(ctx, p, rec); done {
		return o
	}
	stored, wasReplay, err := s.opts.Ledger.Commit(context.WithoutCancel(ctx), rec)
	return s.committed(ctx, p, stored, wasReplay, err)
}

// committed maps the ledger's answer to the commit onto the Outcome.
func (s *Service) committed(ctx context.Context, p *pending, stored ledger.Admission, wasReplay bool, err error) Outcome {
	data := p.data()
	switch {
	case errors.Is(err, ledger.ErrConfirmationConsumed):
		if o, ok := s.sameRequestWon(ctx, p.caller, p.req.IdempotencyKey, p.requestDigest); ok {
			return o
		}
		data.Decision, data.State = "deny", api.StateDenied
		return Outcome{Code: api.CodeConfirmationReplayed,
			Message: "this confirmation was already used", Data: data,
			Violations: []api.Finding{{Code: api.CodeConfirmationReplayed, Gate: "confirmation",
				Message: "the confirmation was consumed by another admission"}}}
	case errors.Is(err, ledger.ErrConfirmationExpired):
		data.Decision, data.State = "deny", api.StateDenied
		return Outcome{Code: api.CodeConfirmationExpired,
			Message: "this confirmation expired", Data: data}
	case errors.Is(err, ledger.ErrCapacityExceeded):
		var ce *ledger.CapacityError
		errors.As(err, &ce)
		if ce != nil && ce.RunID != "" {
			// a stage advance that would have grown its run
			return p.refusedAtCommit(api.CodeStageWorldSizeExceedsRun, growMessage(p.req.Stage, ce), "booking")
		}
		return p.refusedAtCommit(api.CodeBookingCapacityExceeded, capacityMessage(ce), "booking")
	case errors.Is(err, ledger.ErrStorageQuotaExceeded):
		var qe *ledger.StorageQuotaError
		errors.As(err, &qe)
		return p.refusedAtCommit(api.CodeCheckpointCapacityExceeded, fmt.Sprintf(
			"the booking's checkpoint quota of %d GiB cannot hold %d GiB more: its live runs keep %d GiB",
			qe.QuotaGiB, qe.WantGiB, qe.HeldGiB), "checkpoint")
	case errors.Is(err, ledger.ErrBookingReleased):
		return p.refusedAtCommit(api.CodeBookingReleased,
			"the booking was released; no run is admitted on it", "booking")
	case errors.Is(err, ledger.ErrRevoked):
		var re *ledger.RevocationError
		errors.As(err, &re)
		o := revokedOutcome(re.Revocation)
		data.Decision, data.State = "deny", api.StateDenied
		o.Data = data
		return o
	case errors.Is(err, ledger.ErrCostExceeded):
		return p.refusedAtCommit(api.CodeConfirmationCostBelowEstimate,
			"the confirmed cost is below the run's estimated cost", "confirmation")
	case errors.Is(err, ledger.ErrBookingAccount):
		return p.refusedAtCommit(api.CodeBookingAccountMismatch,
			"the booking is bound to another account; nothing was written", "booking")
	case errors.Is(err, ledger.ErrRestartOffPlan), errors.Is(err, ledger.ErrRestartBudget):
		var re *ledger.RestartError
		errors.As(err, &re)
		if errors.Is(err, ledger.ErrRestartOffPlan) {
			return p.refusedAtCommit(api.CodeRestartStepOffPlan, offPlanMessage(re), "lifecycle")
		}
		return p.refusedAtCommit(api.CodeRestartBudgetExceeded, budgetMessage(re), "lifecycle")
	case errors.Is(err, ledger.ErrReportOverdue):
		oe, _ := errors.AsType[*ledger.ReportOverdueError](err)
		return p.refusedAtCommit(api.CodeEvalReportOverdue, overdueMessage(oe), "lifecycle")
	case errors.Is(err, ledger.ErrRunHalted):
		var he *ledger.RunHaltedError
		errors.As(err, &he)
		return p.refusedAtCommit(api.CodeRunHalted, haltedMessage(he.Halt), "lifecycle")
	case errors.Is(err, ledger.ErrRunEnded),
		p.req.Action.Effect() == api.EffectStepRun && errors.Is(err, ledger.ErrNotFound):
		return p.refusedAtCommit(api.CodeRunNotLive,
			"the ledger found the run not live when this admission committed; nothing was written", "lifecycle")
	case errors.Is(err, ledger.ErrStageConflict):
		return p.refusedAtCommit(api.CodeStageConflict,
			"the run is no longer in the stage this advance leaves (another advance won); nothing was written",
			"lifecycle")
	case errors.Is(err, ledger.ErrConfirmationMismatch), errors.Is(err, ledger.ErrNotFound):
		// The stored record changed between lookup and commit, or disagrees
		// with the verified token: never allow on a disagreement.
		data.Decision, data.State = "deny", api.StateDenied
		return Outcome{Code: api.CodeConfirmationInvalid,
			Message: "the stored confirmation does not match this admission", Data: data}
	case errors.Is(err, ledger.ErrKeyConflict):
		data.Decision, data.State = "deny", api.StateDenied
		return Outcome{Code: api.CodeIdempotencyConflict,
			Message: "this idempotency key was used for a different request", Data: data,
			Violations: []api.Finding{{Code: api.CodeIdempotencyConflict, Gate: "idempotency",
				Message: "the idempotency key is bound to another request"}}}
	case errors.As(err, new(*ledger.HoldError)):
		// A restore's hold refused the commit before writing: the outcome
		// is known, and the message says until when.
		return s.ledgerFault("commit", err)
	case err != nil:
		// A fault during the commit leaves its outcome unknown to us (the
		// transaction may have committed): say so, and point at status.
		o := s.ledgerFault("commit", err)
		o.Message = "the ledger failed during the commit; denied — the outcome is unknown: " +
			"query GET /v1/admissions/{idempotency_key} before retrying"
		return o
	case wasReplay:
		return replayed(stored)
	}
	data.Decision, data.State, data.RunID = "allow", stored.State, stored.RunID
	data.GPUs, data.LiveUntil, data.Ticket = stored.GPUs, unixOrZero(stored.LiveUntil), stored.Ticket
	s.countGPUs(p, stored)
	return Outcome{Status: http.StatusOK, Data: data}
}

// countGPUs reports a fresh allow's effect on booked capacity to
// OnRunGPUs. The released figure is what the verify stage saw live.
func (s *Service) countGPUs(p *pending, a ledger.Admission) {
	if s.opts.OnRunGPUs == nil {
		return
	}
	switch a.Action {
	case api.TrainCreate:
		s.opts.OnRunGPUs("admitted", a.GPUs, p.usage.HeldGPUs+a.GPUs, a.BookedGPUs)
	case api.TrainStageAdvance:
		// a grow takes the difference (the run's GPUs as read before)
		if more := p.stageGPUs - p.target.GPUs; more > 0 {
			s.opts.OnRunGPUs("admitted", more, p.usage.HeldGPUs+more, p.target.BookedGPUs)
		}
	case api.TrainCancel, api.TrainCleanup:
		if p.target.Live(p.now) {
			s.opts.OnRunGPUs("released", p.target.GPUs, 0, 0)
		}
	}
}

// refusedAtCommit is a deny decided after the policy allowed: by Go's own
// checks before the commit or by the ledger in it. Nothing was written.
func (p *pending) refusedAtCommit(code api.Code, msg, gate string) Outcome {
	data := p.data()
	data.Decision, data.State = "deny", api.StateDenied
	return Outcome{Code: code, Message: msg, Data: data,
		Violations: []api.Finding{{Code: code, Gate: gate, Message: msg}}}
}

// capacityMessage names the account's own live runs that hold the
// booking's GPUs (run id, GPUs, live until), so the caller knows what to
// cancel: at most ledger.MaxNamedRuns of them (ledger.NamedRuns), then
// how many more. Other accounts' runs are only counted.
func capacityMessage(ce *ledger.CapacityError) string {
	if ce == nil {
		return "the booking has no GPUs left for this run"
	}
	shown, more := ledger.NamedRuns(ce.Runs)
	runs := make([]string, 0, len(shown))
	for _, r := range shown {
		runs = append(runs, fmt.Sprintf("%s (%d GPUs, live until %s)", r.RunID, r.GPUs, r.LiveUntil.UTC().Format(time.RFC3339)))
	}
	named := " (none of them this account's)"
	if len(runs) > 0 {
		named = ": " + strings.Join(runs, ", ")
	}
	if more > 0 {
		named += fmt.Sprintf(" and %d more of this account's", more)
	}
	return fmt.Sprintf("the booking's %d GPUs cannot hold %d more: %d are held by live runs%s",
		ce.BookedGPUs, ce.WantGPUs, ce.HeldGPUs, named)
}

// growMessage is the commit's refusal of a stage advance that would have
// grown its run (ledger.CheckGrow): the figures the policy's
// STAGE_WORLD_SIZE_EXCEEDS_RUN names, as the ledger found them.
func growMessage(stage string, ce *ledger.CapacityError) string {
	return fmt.Sprintf("stage %q needs %d GPUs; the run holds %d and the booking has %d free "+
		"(%d booked, %d held by live runs) when the advance committed; nothing was written",
		stage, ce.StageGPUs, ce.RunGPUs, ce.BookedGPUs-ce.HeldGPUs, ce.BookedGPUs, ce.HeldGPUs)
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}
