package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/booking"
	"github.com/itocompute/itogate/gatekeeper/decisionlog"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// The eval authority's direct post (POST /v1/runs/{run_id}/eval-reports,
// issue 23 item 5): a run whose holder never asks to advance is judged all
// the same. The report is verified as on a stage advance (trust.evals: typ,
// issuer, audience, expiry; bound to the run, its current stage and its
// manifest), judged by the active bundle's eval gate on its own
// (policy.ReportQuery, the rules an advance's halt is defined from), and
// then either halts the run (ledger.Store.HaltRun, as a failed advance
// does) or records that the stage's report passed (ledger.Store.
// RecordReport), which keeps the run live past its stage's report
// deadline. Nothing else is written; a refusal writes nothing.

// ReportJudge is a decider that judges one eval report on its own
// (policy.Engine.JudgeReport).
type ReportJudge interface {
	JudgeReport(ctx context.Context, input map[string]any) (policy.ReportVerdict, error)
}

// Verdicts of a posted eval report (api.EvalReportResult.Verdict).
const (
	VerdictFailed = "failed"
	VerdictPassed = "passed"
)

// PostEvalReport answers the eval authority's report for runID. The report
// is the post's only credential: a token that does not verify with
// trust.evals (any other purpose's key included) is 401
// EVAL_REPORT_UNAUTHENTICATED. A failing report halts a live run (201; the
// same report again answers the same halt, 200); a passing one records the
// stage's report (201; again, 200); a run that may take no work answers
// with its state's code (RunRecord.MayWork: RUN_HALTED, EVAL_REPORT_OVERDUE,
// the revocation's code, RUN_NOT_LIVE); every other refusal has its own
// code and writes nothing. Every post, refused or not, is written to the
// decision log.
func (s *Service) PostEvalReport(ctx context.Context, runID string, req api.EvalReportRequest) Outcome {
	ev := decisionlog.Event{DecisionID: NewDecisionID(), Time: s.opts.Now().UTC(), Action: "eval.report",
		KeyIDs: map[string]string{}, JTIs: map[string]string{}}
	out := s.postEvalReport(ctx, runID, req, &ev)
	s.logEvalReport(ev, out)
	return out
}

func (s *Service) postEvalReport(ctx context.Context, runID string, req api.EvalReportRequest, ev *decisionlog.Event) Outcome {
	now := ev.Time
	switch {
	case !ledger.IsRunID(runID):
		return fail(api.CodeRequestInvalid, "run_id: run_ followed by 26 lowercase letters and digits")
	case req.EvalReport == "" || len(req.EvalReport) > verify.DefaultMaxTokenBytes:
		return fail(api.CodeRequestInvalid, fmt.Sprintf("eval_report: a compact JWS of 1 to %d bytes", verify.DefaultMaxTokenBytes))
	case len(req.Manifest) == 0:
		return fail(api.CodeManifestRequired, "an eval report is judged with the run's manifest: send its bytes")
	case len(req.Manifest) > manifest.MaxBytes:
		return fail(api.CodeManifestTooLarge, fmt.Sprintf("manifest larger than %d bytes", manifest.MaxBytes))
	case s.opts.Evals == nil:
		return fail(api.CodeEvalReportUnauthorized, "no eval authority is configured (trust.evals); eval reports cannot be verified")
	}
	ev.RunID = runID
	c, err := s.opts.Evals.Verify([]byte(req.EvalReport), now)
	if err != nil {
		o := fail(api.CodeEvalReportUnauthorized, safeTokenMessage("eval report", err))
		o.Cause = err
		return o
	}
	ev.KeyIDs["evals"], ev.JTIs["evals"] = c.KeyID, c.JTI
	if kind, _ := c.Raw["kind"].(string); kind != "eval_report" {
		return fail(api.CodeEvalReportMismatch, fmt.Sprintf("the token's kind is %q, not eval_report", boundText(kind)))
	}
	if claimed, _ := c.Raw["run_id"].(string); claimed != runID {
		return fail(api.CodeEvalReportMismatch, fmt.Sprintf("the eval report's run_id is %q, the path names %s",
			boundText(claimed), runID))
	}
	run, err := s.opts.Ledger.RunRecord(ctx, runID)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return fail(api.CodeRunStatusNotFound, "no run with this id was admitted")
	case err != nil:
		return s.ledgerFault("run lookup", err)
	}
	ev.Account = run.Account
	sum := sha256.Sum256([]byte(req.EvalReport))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	// The same report again: the answer it had, nothing new judged.
	if done, ok := reportDone(run, digest, now); ok {
		return done
	}
	if err := run.MayWork(now); err != nil {
		return runStateOutcome(run, now, err)
	}
	if stage, _ := c.Raw["stage"].(string); stage != run.Stage {
		return fail(api.CodeEvalReportMismatch, fmt.Sprintf("the eval report's stage is %q, the run is in stage %s",
			boundText(stage), run.Stage))
	}
	if md, _ := c.Raw["manifest_digest"].(string); md != run.ManifestDigest {
		return fail(api.CodeEvalReportMismatch, "the eval report's manifest_digest is not the one the run was admitted with")
	}
	ev.ManifestDigest = manifest.Digest(req.Manifest)
	if ev.ManifestDigest != run.ManifestDigest {
		return fail(api.CodeRunManifestMismatch, "the manifest sent is not the one the run was admitted with")
	}
	doc, err := manifest.Parse(req.Manifest)
	if err != nil {
		if me, ok := errors.AsType[*manifest.Error](err); ok {
			return fail(me.Code, me.Error())
		}
		return fail(api.CodeInternal, "manifest schema unavailable")
	}
	verdict, o, done := s.judgeReport(ctx, run, doc, c, now)
	ev.BundleRevision, ev.BundleDigest = verdict.BundleRevision, verdict.BundleDigest
	if done {
		return o
	}
	if len(verdict.Problems) > 0 {
		o := fail(api.CodeEvalReportMismatch, verdict.Problems[0])
		for _, p := range verdict.Problems {
			o.Violations = append(o.Violations, api.Finding{Code: api.CodeEvalReportMismatch, Gate: "lifecycle", Message: p})
		}
		return o
	}
	by := "evals:" + c.KeyID
	if len(verdict.FailedEvals) > 0 {
		h := ledger.Halt{RunID: run.RunID, Account: run.Account, BookingID: run.BookingID, RunHalt: ledger.RunHalt{
			At: now, DecisionID: ev.DecisionID, Stage: run.Stage, ReportDigest: digest,
			FailedEvals: verdict.FailedEvals, By: by}}
		stored, halted, err := s.opts.Ledger.HaltRun(context.WithoutCancel(ctx), h)
		if err == nil && halted {
			s.opts.Logger.Info("run halted", "run_id", h.RunID, "decision_id", h.DecisionID, "stage", h.Stage,
				"failed_evals", strings.Join(h.FailedEvals, ","), "by", "eval authority")
		}
		return s.reportRecorded(ctx, run, stored, halted, err, digest, now)
	}
	p := ledger.Report{RunID: run.RunID, Account: run.Account, BookingID: run.BookingID, RunReport: ledger.RunReport{
		At: now, DecisionID: ev.DecisionID, Stage: run.Stage, ReportDigest: digest, By: by}}
	stored, recorded, err := s.opts.Ledger.RecordReport(context.WithoutCancel(ctx), p)
	return s.reportRecorded(ctx, run, stored, recorded, err, digest, now)
}

// judgeReport asks the active bundle's eval gate about the verified report
// c for run, with the run's manifest doc, in an evaluation slot.
func (s *Service) judgeReport(ctx context.Context, run ledger.RunRecord, doc map[string]any, c *verify.Claims,
	now time.Time) (policy.ReportVerdict, Outcome, bool) {
	decider := s.opts.Policy()
	if decider == nil {
		return policy.ReportVerdict{}, fail(api.CodePolicyNotReady, "no verified policy bundle is active"), true
	}
	judge, ok := decider.(ReportJudge)
	if !ok {
		return policy.ReportVerdict{}, fail(api.CodePolicyDecisionInvalid, "the active bundle judges no eval report"), true
	}
	if !s.limit.acquire(ctx) {
		return policy.ReportVerdict{}, overloaded(false), true
	}
	in := Input{
		Now:            now,
		Request:        Request{RunID: run.RunID, BookingID: run.BookingID},
		ManifestDigest: run.ManifestDigest,
		Manifest:       doc,
		EvalReports:    []EvalReport{{Verified: VerifiedBy(c.KeyID), Claims: copyClaims(c.Raw)}},
		Ledger: LedgerFacts{Run: &RunFacts{State: string(api.RunLive), Stage: run.Stage,
			ManifestDigest: run.ManifestDigest, Restarts: run.Restarts, Plan: run.Plan, GPUs: run.GPUs}},
	}
	v, err := func() (policy.ReportVerdict, error) {
		defer s.limit.release()
		return judge.JudgeReport(ctx, in.Document())
	}()
	if err != nil {
		code := api.CodePolicyEvaluationFailed
		if pe, ok := errors.AsType[*policy.Error](err); ok {
			code = pe.Code
		}
		s.opts.Logger.Error("eval report verdict failed", "run_id", run.RunID, "code", code,
			"err", decisionlog.Redact(err.Error()))
		return v, fail(code, "the policy produced no usable verdict on the eval report; nothing was written"), true
	}
	return v, Outcome{}, false
}

// reportRecorded maps the ledger's answer to a halt or a recorded report
// (changed: it wrote one) onto the post's outcome.
func (s *Service) reportRecorded(ctx context.Context, run, stored ledger.RunRecord, changed bool, err error,
	digest string, now time.Time) Outcome {
	switch {
	case errors.Is(err, ledger.ErrUnavailable):
		o := s.ledgerFault("eval report", err)
		o.Message = "the eval report was judged, but the ledger could not record it; nothing was written — post it again"
		return o
	case errors.Is(err, ledger.ErrNotFound):
		return fail(api.CodeRunStatusNotFound, "no run with this id was admitted")
	case errors.Is(err, ledger.ErrStageConflict):
		return fail(api.CodeStageConflict, fmt.Sprintf(
			"the run left stage %s before the eval report was recorded; nothing was written", run.Stage))
	case err != nil:
		// The run changed state since it was read: its state's code.
		if fresh, rerr := s.opts.Ledger.RunRecord(ctx, run.RunID); rerr == nil {
			run = fresh
		}
		return runStateOutcome(run, now, err)
	case changed:
		verdict := VerdictPassed
		if stored.Halt.ReportDigest == digest {
			verdict = VerdictFailed
		}
		res := reportResult(stored, verdict, now)
		res.Created = true
		return Outcome{Status: http.StatusCreated, Notice: "recorded", Extra: res}
	}
	// Nothing written: this very report did it first, or another one did.
	if o, ok := reportDone(stored, digest, now); ok {
		return o
	}
	if err := stored.MayWork(now); err != nil {
		return runStateOutcome(stored, now, err)
	}
	// A passing report of another post was recorded for the stage first.
	return Outcome{Status: http.StatusOK, Notice: "a passing eval report for this stage was recorded before; it is kept",
		Extra: reportResult(stored, VerdictPassed, now)}
}

// reportDone is the answer to a report the run already records as its own
// (by digest): the halt it caused, or the stage's passing report while the
// run is live and in that stage. ok is false otherwise.
func reportDone(run ledger.RunRecord, digest string, now time.Time) (Outcome, bool) {
	switch {
	case run.Halt.ReportDigest == digest:
		return Outcome{Status: http.StatusOK, Notice: "this eval report halted the run before; nothing changed",
			Extra: reportResult(run, VerdictFailed, now)}, true
	case run.Report.ReportDigest == digest && run.Report.Stage == run.Stage && run.MayWork(now) == nil:
		return Outcome{Status: http.StatusOK, Notice: "this eval report was recorded before; nothing changed",
			Extra: reportResult(run, VerdictPassed, now)}, true
	}
	return Outcome{}, false
}

// reportResult is the post's data for the halt or passing report run
// records.
func reportResult(run ledger.RunRecord, verdict string, now time.Time) api.EvalReportResult {
	r := api.EvalReportResult{RunID: run.RunID, Verdict: verdict, State: run.State(now)}
	if verdict == VerdictFailed {
		h := run.Halt
		r.Stage, r.FailedEvals, r.ReportDigest, r.DecisionID, r.RecordedAt = h.Stage, h.FailedEvals, h.ReportDigest,
			h.DecisionID, h.At.Unix()
		return r
	}
	p := run.Report
	r.Stage, r.ReportDigest, r.DecisionID, r.RecordedAt = p.Stage, p.ReportDigest, p.DecisionID, p.At.Unix()
	return r
}

// logEvalReport writes the post to the decision log: who (the eval
// authority's key id and the report's jti), the run and its account, the
// verdict or the refusal's code. Never a token.
func (s *Service) logEvalReport(ev decisionlog.Event, out Outcome) {
	if s.opts.DecisionLog == nil {
		return
	}
	ev.Status = out.HTTPStatus()
	switch r, ok := out.Extra.(api.EvalReportResult); {
	case !out.OK():
		ev.Result, ev.Codes = "refused", []string{string(out.Code)}
	case ok && r.Verdict == VerdictFailed:
		ev.Result = "halted"
	default:
		ev.Result = VerdictPassed
	}
	if s.opts.DecisionLog.Prepare(context.Background(), nil, &ev) {
		s.opts.DecisionLog.Log(ev)
	}
}

// overdueMessage names the stage whose eval report is overdue.
func overdueMessage(e *ledger.ReportOverdueError) string {
	return fmt.Sprintf("the run is halted: the eval report of stage %s was due at %s and no passing report reached "+
		"the ledger before it; only train.cancel and train.cleanup are admitted", e.Stage, e.Due.UTC().Format(time.RFC3339))
}

// maxReportDeadline bounds a stage's report deadline (ten years): past it
// time.Duration would overflow; no run lives that long.
const maxReportDeadline = 10 * 366 * 24 * time.Hour

// reportDue is when the eval report of the stage a create or advance
// enters is due: now plus the decision's
// estimates.stage_report_deadline_seconds (the lifecycle gate's, from
// bundle data); zero (no deadline) when the decision gives none or
// something that is not a positive whole number of seconds within
// maxReportDeadline.
func reportDue(now time.Time, estimates map[string]any) time.Time {
	n, ok := booking.Count(estimates["stage_report_deadline_seconds"])
	if !ok || n <= 0 || n > int64(maxReportDeadline/time.Second) || n > math.MaxInt64/int64(time.Second) {
		return time.Time{}
	}
	return now.Add(time.Duration(n) * time.Second)
}
