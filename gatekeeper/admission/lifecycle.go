package admission

import (
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
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
	if spec.CheckpointStep && req.CheckpointStep < 0 {
		return errors.New("checkpoint_step must be >= 0")
	}
	if req.Stage != "" && !spec.Stage {
		return errors.New("stage is only for " + only(func(s api.ActionSpec) bool { return s.Stage }))
	}
	if req.CheckpointStep != 0 && !spec.CheckpointStep {
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
// record (p.target): whether it is live at now ("live", or how it is not:
// "cancelled", "cleaned_up", "released", "ended" past its declared end,
// "unknown" without a record), its stage and the manifest it was admitted
// with (from its train.create admission).
func (s *Service) runFacts(p *pending, run ledger.Admission) {
	if p.req.Action.Effect() != api.EffectStepRun {
		return
	}
	rec := p.target
	state := "unknown"
	switch {
	case rec.RunID == "":
	case rec.Live(p.now):
		state = "live"
	case rec.EndedBy == api.TrainCancel:
		state = "cancelled"
	case rec.EndedBy == api.TrainCleanup:
		state = "cleaned_up"
	case rec.EndedBy == api.BookingRelease:
		state = "released"
	default:
		state = "ended"
	}
	p.runStage = rec.Stage
	p.ledgerRun = &RunFacts{State: state, Stage: rec.Stage, ManifestDigest: run.ManifestDigest}
}

// firstStage is the stage a created run starts in: its manifest's
// objective.stage (schema-validated before the policy ran).
func firstStage(doc map[string]any) string {
	obj, _ := doc["objective"].(map[string]any)
	stage, _ := obj["stage"].(string)
	return stage
}
