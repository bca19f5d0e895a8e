package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/booking"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// The run's life after train.create: a stage advance (with the eval
// authority's report) and a restart from a checkpoint (with its own
// confirmation). Both act on a live run of the caller's account on the
// request's booking; the policy decides (ito.lifecycle) and the ledger
// re-checks the run's state and stage under the commit.

var reStage = regexp.MustCompile(`^[a-z][a-z_]{0,31}$`)

// validateLifecycle checks the fields only some actions take (spec): stage
// for train.stage.advance, checkpoint_step for train.restart, eval reports
// for a create (ladder decisions) or an advance (its eval report).
func validateLifecycle(req Request, spec api.ActionSpec) error {
	only := func(has func(api.ActionSpec) bool) string { return api.ActionsWhere(has) }
	if spec.Stage && !reStage.MatchString(req.Stage) {
		return errors.New("stage: the stage " + string(req.Action) + " moves the run to (lowercase letters and _)")
	}
	if spec.Stage && len(req.Manifest) == 0 {
		return errors.New(string(req.Action) + " needs the run's manifest bytes and signature")
	}
	if spec.CheckpointStep && req.CheckpointStep == nil {
		return errors.New("checkpoint_step: the step " + string(req.Action) + " restarts from (required, 0 included)")
	}
	if spec.CheckpointStep && *req.CheckpointStep < 0 {
		return errors.New("checkpoint_step must be >= 0")
	}
	if req.Stage != "" && !spec.Stage {
		return errors.New("stage is only for " + only(func(s api.ActionSpec) bool { return s.Stage }))
	}
	if req.CheckpointStep != nil && !spec.CheckpointStep {
		return errors.New("checkpoint_step is only for " + only(func(s api.ActionSpec) bool { return s.CheckpointStep }))
	}
	if len(req.EvalReports) > 0 && !spec.EvalReports {
		return errors.New("eval_reports are only for " + strings.ReplaceAll(
			only(func(s api.ActionSpec) bool { return s.EvalReports }), " or ", " and "))
	}
	if len(req.EvalReports) > api.MaxEvalReports {
		return errors.New("eval_reports: too many tokens")
	}
	for _, t := range req.EvalReports {
		if t == "" {
			return errors.New("eval_reports: empty token")
		}
	}
	return nil
}

// verifyEvalReports verifies every eval-authority token with trust.evals
// and returns them as input.eval_reports. Any token that does not verify
// denies the admission (a forged or expired report is not "missing"); a
// service without an eval authority verifies none.
func (s *Service) verifyEvalReports(tokens []string, now time.Time, tr *trace) ([]EvalReport, Outcome, bool) {
	out := make([]EvalReport, 0, len(tokens))
	if len(tokens) == 0 {
		return out, Outcome{}, false
	}
	if s.opts.Evals == nil {
		return nil, denied(api.CodeEvalReportInvalid, "no eval authority is configured (trust.evals); eval reports cannot be verified"), true
	}
	for i, t := range tokens {
		c, err := s.opts.Evals.Verify([]byte(t), now)
		if err != nil {
			o := denied(tokenCode(err), safeTokenMessage("eval report", err))
			o.Cause = err
			return nil, o, true
		}
		if i == 0 {
			tr.keyIDs["evals"], tr.jtis["evals"] = c.KeyID, c.JTI
		}
		out = append(out, EvalReport{Verified: VerifiedBy(c.KeyID), Claims: copyClaims(c.Raw)})
	}
	return out, Outcome{}, false
}

// runFacts sets input.ledger.run for an advance or restart from the run's
// record (p.target): its state at now (ledger.RunRecord.State: "live",
// "halted", "revoked", "cancelled", "cleaned_up", "released", "expired";
// "unknown" without a record), the halt that stopped it, its stage and the
// manifest it was admitted with (from its train.create admission).
func (s *Service) runFacts(p *pending, run ledger.Admission) {
	if p.req.Action.Effect() != api.EffectStepRun {
		return
	}
	rec := p.target
	state := "unknown"
	if rec.RunID != "" {
		state = string(rec.State(p.now))
	}
	p.runStage = rec.Stage
	p.ledgerRun = &RunFacts{State: state, Stage: rec.Stage, ManifestDigest: run.ManifestDigest,
		Restarts: rec.Restarts, Plan: rec.Plan, GPUs: rec.GPUs}
	if state == string(api.RunHalted) {
		p.ledgerRun.Halt = &HaltFacts{Stage: rec.Halt.Stage, FailedEvals: rec.Halt.FailedEvals,
			ReportDigest: rec.Halt.ReportDigest, DecisionID: rec.Halt.DecisionID}
	}
}

// halt records the halt a deny carries (policy.Decision.Halt: the eval
// report fails the gate of the run's stage) on the run, before the deny is
// answered: a failed gate is a fact about the run, not about the request.
// Only a stage advance of a live run halts, and only with exactly one
// verified eval report bound to this run and the stage the ledger records
// it in; nothing is consumed. A halt the ledger refuses (the run moved on,
// ended or was revoked meanwhile) leaves the deny as it is; a ledger fault
// answers 503, so a retry of the same request halts.
func (s *Service) halt(ctx context.Context, p *pending) (Outcome, bool) {
	h := p.decision.Halt
	if spec, _ := p.req.Action.Spec(); h == nil || !spec.Stage || p.ledgerRun == nil ||
		p.ledgerRun.State != string(api.RunLive) {
		return Outcome{}, false
	}
	report := -1
	for i, r := range p.evalReports {
		if r.Verified.Verified && r.Claims["kind"] == "eval_report" && r.Claims["run_id"] == p.req.RunID &&
			r.Claims["stage"] == p.runStage {
			if report >= 0 {
				return Outcome{}, false // two reports for the stage: not one fact
			}
			report = i
		}
	}
	if report < 0 || report >= len(p.req.EvalReports) {
		return Outcome{}, false
	}
	sum := sha256.Sum256([]byte(p.req.EvalReports[report]))
	halt := ledger.Halt{RunID: p.req.RunID, Account: p.caller.Account, BookingID: p.req.BookingID,
		RunHalt: ledger.RunHalt{At: p.now, DecisionID: p.tr.decisionID, Stage: p.runStage,
			ReportDigest: "sha256:" + hex.EncodeToString(sum[:]), FailedEvals: h.FailedEvals,
			By: "evals:" + p.evalReports[report].KeyID}}
	_, halted, err := s.opts.Ledger.HaltRun(context.WithoutCancel(ctx), halt)
	switch {
	case err == nil && halted:
		p.halted = &halt
		s.opts.Logger.Info("run halted", "run_id", halt.RunID, "decision_id", halt.DecisionID, "stage", halt.Stage,
			"failed_evals", strings.Join(halt.FailedEvals, ","))
	case err == nil:
	case errors.Is(err, ledger.ErrUnavailable):
		o := s.ledgerFault("halt", err)
		o.Message = "the eval report fails the stage's gate, and the run's halt could not be recorded; " +
			"denied, nothing was consumed — retry the same request"
		return o, true
	default:
		s.opts.Logger.Info("run not halted", "run_id", halt.RunID, "decision_id", halt.DecisionID, "reason", err.Error())
	}
	return Outcome{}, false
}

// offPlanMessage names a restart step its run's plan never writes, and the
// plan.
func offPlanMessage(e *ledger.RestartError) string {
	return fmt.Sprintf("step %d is no checkpoint of this run: it writes one every %d steps up to step %d",
		e.Step, e.Plan.IntervalSteps, e.Plan.Steps)
}

// budgetMessage names the figures of a restart past the run's budget.
func budgetMessage(e *ledger.RestartError) string {
	msg := fmt.Sprintf("restart %d of this run is past its budget of %d restarts", e.Restarts+1, e.Budget)
	if p := e.Plan; p.LostSecondsPerRestart > 0 && p.WallClockSeconds > 0 {
		msg += fmt.Sprintf(" (%d × %d s expected lost work of its %d s wall clock)", e.Restarts+1,
			p.LostSecondsPerRestart, p.WallClockSeconds)
	}
	return msg
}

// haltedMessage names a halt's stage and failed evals.
func haltedMessage(h ledger.RunHalt) string {
	return fmt.Sprintf("the run is halted: the eval gate of stage %s failed (%s); only train.cancel and train.cleanup are admitted",
		h.Stage, strings.Join(h.FailedEvals, ", "))
}

// runPlan is the checkpoint plan a train.create records on its run
// (ledger.RunPlan), from the verified manifest, the run's declared end and
// the checkpoint gate's lost-work estimate: checkpoint.interval_steps; the
// run's steps — objective.max_steps, or ceil(max_tokens / (global batch ×
// sequence length)) when that is smaller (the optimizer steps its tokens
// take; the checkpoint gate's formula); the declared wall-clock seconds;
// the work a restart is expected to lose, rounded up. A plan it cannot
// compute is recorded as none (the policy refuses such a manifest first).
func runPlan(doc map[string]any, run booking.Run, now time.Time, estimates map[string]any) ledger.RunPlan {
	ckpt, _ := doc["checkpoint"].(map[string]any)
	obj, _ := doc["objective"].(map[string]any)
	interval, ok := booking.Count(ckpt["interval_steps"])
	if !ok {
		return ledger.RunPlan{}
	}
	var steps int64
	if n, ok := booking.Count(obj["max_steps"]); ok {
		steps = n
	}
	tokens, ok1 := booking.Count(obj["max_tokens"])
	gbs, ok2 := booking.Count(obj["global_batch_size"])
	seq, ok3 := booking.Count(obj["sequence_length"])
	if ok1 && ok2 && ok3 && gbs <= math.MaxInt64/seq {
		if n := (tokens + gbs*seq - 1) / (gbs * seq); steps == 0 || n < steps {
			steps = n
		}
	}
	if steps == 0 {
		return ledger.RunPlan{}
	}
	p := ledger.RunPlan{IntervalSteps: interval, Steps: steps}
	if wall := run.End.Sub(now); wall > 0 {
		p.WallClockSeconds = int64(math.Ceil(wall.Seconds()))
	}
	if lost, ok := number(estimates["checkpoint_lost_seconds_per_failure"]); ok && lost > 0 && lost < 1<<53 {
		p.LostSecondsPerRestart = int64(math.Ceil(lost))
	}
	// the checkpoint storage the run keeps and the booking's quota, whole
	// GiB as the policy judged them (the ledger sums them over the
	// booking's live runs at commit); no quota, no check
	if gib, ok := booking.Count(estimates["checkpoint_needed_gib"]); ok {
		p.CheckpointGiB = gib
	}
	if quota, ok := booking.Count(estimates["checkpoint_quota_gib"]); ok {
		p.StorageQuotaGiB = quota
	}
	return p
}

// restartBudget is the decision's estimates.restart_budget for a restart:
// the most restarts the run may have, this one included; 0 (no budget the
// ledger re-checks) when the bundle gives none.
func restartBudget(estimates map[string]any) int {
	n, ok := booking.Count(estimates["restart_budget"])
	if !ok || n > math.MaxInt32 {
		return 0
	}
	return int(n)
}

// number reads any JSON number.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// firstStage is the stage a created run starts in: its manifest's
// objective.stage (schema-validated before the policy ran).
func firstStage(doc map[string]any) string {
	obj, _ := doc["objective"].(map[string]any)
	stage, _ := obj["stage"].(string)
	return stage
}
