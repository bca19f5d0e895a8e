package policy

import (
	"context"
	"errors"
	"fmt"

	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// ReportQuery is the eval gate's verdict on one eval report, on its own:
// what the eval authority's direct post (POST /v1/runs/{run_id}/eval-reports)
// asks. It is the lifecycle gate's own rules, the ones a stage advance's halt
// is defined from, so the post and the advance cannot disagree. A bundle
// without it judges no report: the post is refused with
// api.CodePolicyDecisionInvalid, and nothing is written.
const ReportQuery = "data.ito.lifecycle.report_verdict"

// MaxReportProblems bounds the problems a verdict may name.
const MaxReportProblems = 16

// ReportVerdict is a validated data.ito.lifecycle.report_verdict.
type ReportVerdict struct {
	// Problems say why the report cannot be judged for the run (not
	// verified, not the run's manifest, not bound to the run, its stage,
	// manifest or battery); empty when it can.
	Problems []string
	// FailedEvals are the evals of the stage's gate that failed or have no
	// result, sorted; empty when the report passes. Meaningful only
	// without Problems.
	FailedEvals []string
	// BundleRevision and BundleDigest name the bundle that judged.
	BundleRevision, BundleDigest string
}

// JudgeReport evaluates ReportQuery for input (an admission input document
// holding one eval report, the run's ledger facts and its manifest: see
// docs/policy-input.md), with the same deadline, staleness and error codes
// as Decide. input.facts is not read.
func (e *Engine) JudgeReport(ctx context.Context, input map[string]any) (ReportVerdict, error) {
	parsed, err := inputValue(input)
	if err != nil {
		return ReportVerdict{}, &Error{Code: api.CodePolicyEvaluationFailed, Err: fmt.Errorf("input: %w", err)}
	}
	r, err := e.evalOne(ctx, e.report, rego.EvalParsedInput(parsed), "report verdict")
	if err != nil {
		return ReportVerdict{}, err
	}
	v, err := parseVerdict(r.Bindings["verdict"])
	if err != nil {
		return ReportVerdict{}, &Error{Code: api.CodePolicyDecisionInvalid, Err: fmt.Errorf("report verdict: %w", err)}
	}
	v.BundleRevision, v.BundleDigest = e.revision, e.digest
	return v, nil
}

// parseVerdict reads {"problems": [text, ...], "failed_evals": [name, ...]}:
// at most MaxReportProblems texts, and the failed evals as a halt names them
// (parseHalt), none at all being a pass.
func parseVerdict(v any) (ReportVerdict, error) {
	obj, ok := v.(map[string]any)
	if !ok || len(obj) != 2 {
		return ReportVerdict{}, errors.New(`not {"problems": [...], "failed_evals": [...]}`)
	}
	problems, ok := obj["problems"].([]any)
	if !ok || len(problems) > MaxReportProblems {
		return ReportVerdict{}, fmt.Errorf("problems is not an array of at most %d texts", MaxReportProblems)
	}
	out := ReportVerdict{Problems: make([]string, 0, len(problems))}
	for _, p := range problems {
		text, ok := p.(string)
		if !ok || text == "" {
			return ReportVerdict{}, errors.New("problems holds something other than a text")
		}
		out.Problems = append(out.Problems, text)
	}
	failed, ok := obj["failed_evals"].([]any)
	if !ok {
		return ReportVerdict{}, errors.New("failed_evals is not an array")
	}
	if len(failed) > 0 {
		h, err := parseHalt(map[string]any{"failed_evals": failed})
		if err != nil {
			return ReportVerdict{}, err
		}
		out.FailedEvals = h.FailedEvals
	}
	return out, nil
}
