package scenario

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/trust"
)

// EvalReport mints an eval report of the development eval authority
// (trust.evals) bound to the run, the stage it ends, the manifest and the
// battery, with one result per metric.
func (r *Runner) EvalReport(runID, stage, manifestDigest, battery string, results map[string]float64) (string, error) {
	return r.mint(r.keys.Evals, config.TypeEvals, map[string]any{
		"iss": trust.DevEvalsIssuer, "aud": trust.DevEvalsAudience, "sub": "eval-authority",
		"kind": "eval_report", "run_id": runID, "stage": stage, "manifest_digest": manifestDigest,
		"battery_id": battery, "results": results,
	}, 10*time.Minute)
}

// PostEvalReport posts report for runID with the run's manifest bytes raw
// as the eval authority does (POST /v1/runs/{run_id}/eval-reports, no
// bearer) and returns the status and the parsed envelope.
func (r *Runner) PostEvalReport(ctx context.Context, runID, report string, raw []byte) (int, api.Envelope[api.EvalReportResult], error) {
	var env api.Envelope[api.EvalReportResult]
	resp, err := r.evals.PostEvalReport(ctx, runID, report, raw)
	if err != nil {
		return 0, env, err
	}
	if err := json.Unmarshal(resp.Body, &env); err != nil {
		return resp.Status, env, fmt.Errorf("HTTP %d: not an envelope", resp.Status)
	}
	return resp.Status, env, nil
}

// ConfirmRestart mints a train.restart confirmation for runID from
// checkpoint step and deposits it.
func (r *Runner) ConfirmRestart(ctx context.Context, runID string, step int64) (string, error) {
	tok, err := r.mint(r.keys.Confirmation, config.TypeConfirmation, map[string]any{
		"iss": trust.DevConfirmationIssuer, "aud": trust.DevAudience, "sub": Account,
		"act": "train.restart", "booking_id": Booking, "manifest_digest": "", "cost_usd": "0.00",
		"run_id": runID, "checkpoint_step": step,
	}, 10*time.Minute)
	if err != nil {
		return "", err
	}
	return r.depositor.DepositRef(ctx, tok)
}

// LongContextSettings are the curriculum's long_context settings: four
// times the fixture's 8192-token sequences on context parallel 4, which
// leaves data parallel 16 of the run's 64 GPUs.
var LongContextSettings = map[string]any{
	"objective":   map[string]any{"sequence_length": 32768},
	"parallelism": map[string]any{"context": 4, "data": 16},
}

// Curriculum is the llama3-8b fixture with a staged curriculum (pretrain →
// long_context → sft), LongContextSettings for its long_context stage and
// an eval gate per stage, signed with the development manifest key.
func (r *Runner) Curriculum() (Manifest, error) {
	return r.CurriculumWith(map[string]any{"long_context": LongContextSettings})
}

// CurriculumWith is Curriculum with stageSettings as its stage_settings
// (none when nil).
func (r *Runner) CurriculumWith(stageSettings map[string]any) (Manifest, error) {
	m, err := r.LoadManifest("llama3-8b")
	if err != nil {
		return Manifest{}, err
	}
	doc := m.Doc
	doc["name"] = "llama3-8b-curriculum"
	doc["stages"] = []string{"pretrain", "long_context", "sft"}
	if stageSettings != nil {
		doc["stage_settings"] = stageSettings
	}
	doc["eval_gates"] = []map[string]any{
		{"stage": "pretrain", "suite": "ito-evals", "metric": "mmlu_5shot", "min": 0.25},
		{"stage": "long_context", "suite": "ito-evals", "metric": "ruler_32k", "min": 0.5},
		{"stage": "sft", "suite": "ito-evals", "metric": "ifeval_prompt_strict", "min": 0.4},
	}
	raw, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return Manifest{}, err
	}
	out, err := r.SignManifest(raw)
	out.Name = "llama3-8b-curriculum"
	return out, err
}

// AdvanceRequest builds a train.stage.advance of runID to stage carrying
// the run's manifest m and reports, with a fresh entitlement and its own
// deposited confirmation.
func (r *Runner) AdvanceRequest(ctx context.Context, m Manifest, runID, stage string, reports ...string) (api.AdmissionRequest, error) {
	ref, err := r.Confirm(ctx, "train.stage.advance", "", "0.00", runID)
	if err != nil {
		return api.AdmissionRequest{}, err
	}
	ent, err := r.EntitlementFor(m, nil)
	if err != nil {
		return api.AdmissionRequest{}, err
	}
	return api.AdmissionRequest{
		Action: "train.stage.advance", BookingID: Booking, IdempotencyKey: r.Key("advance"),
		Manifest: m.Raw, ManifestSignature: m.Signature, EntitlementToken: ent, ConfirmationRef: ref,
		RunID: runID, Stage: stage, EvalReports: reports,
	}, nil
}

// RestartRequest builds a train.restart of runID from checkpoint step with
// a fresh entitlement (for m's booking) and its own deposited confirmation.
func (r *Runner) RestartRequest(ctx context.Context, m Manifest, runID string, step int64) (api.AdmissionRequest, error) {
	ref, err := r.ConfirmRestart(ctx, runID, step)
	if err != nil {
		return api.AdmissionRequest{}, err
	}
	ent, err := r.EntitlementFor(m, nil)
	if err != nil {
		return api.AdmissionRequest{}, err
	}
	return api.AdmissionRequest{
		Action: "train.restart", BookingID: Booking, IdempotencyKey: r.Key("restart"),
		EntitlementToken: ent, ConfirmationRef: ref, RunID: runID, CheckpointStep: &step,
	}, nil
}

// RunLife drives one run through its life: create, another account's
// train.create naming the run's booking (denied BOOKING_ACCOUNT_MISMATCH,
// the run untouched), a stage advance with passing evals, a restart from a
// checkpoint with its own confirmation, a restart from a step its
// checkpoint plan never writes (denied), a stage advance with a failed eval
// (denied, and the run halted; there is no override field to send), a
// restart and an advance of the halted run (denied RUN_HALTED), a cancel,
// and a restart of the cancelled run (denied).
func (r *Runner) RunLife(ctx context.Context) []Result {
	var out []Result
	add := func(res Result) { out = append(out, res) }
	send := func(req api.AdmissionRequest, err error) (Answer, error) {
		if err != nil {
			return Answer{}, err
		}
		return r.Admit(ctx, req)
	}
	m, err := r.Curriculum()
	if err != nil {
		return []Result{{Name: "run life: manifest", Got: err.Error()}}
	}
	digest := manifest.Digest(m.Raw)
	created, _, err := r.Create(ctx, m, r.Key("curriculum"))
	add(check("run life: create (pretrain → long_context → sft)", Expect{Status: 200}, created, err))
	runID := created.Data.RunID
	if runID == "" {
		return out
	}

	a, err := r.OtherAccountCreate(ctx, m)
	add(check("run life: another account names this booking ("+Booking+") in its train.create",
		Expect{Status: 403, Codes: []string{"BOOKING_ACCOUNT_MISMATCH"}}, a, err))

	report, err := r.EvalReport(runID, "pretrain", digest, "ito-battery-pretrain-2026.10",
		map[string]float64{"mmlu_5shot": 0.31, "hellaswag_acc": 0.42})
	if err == nil {
		a, err = send(r.AdvanceRequest(ctx, m, runID, "long_context", report))
	}
	res := check("run life: advance to long_context (evals pass; the run stayed live)", Expect{Status: 200}, a, err)
	res.Detail = "state " + string(a.Data.State)
	add(res)

	a, err = send(r.RestartRequest(ctx, m, runID, 500))
	add(check("run life: restart from step 500 (own confirmation)", Expect{Status: 200}, a, err))

	a, err = send(r.RestartRequest(ctx, m, runID, 499))
	add(check("run life: restart from step 499, which the checkpoint plan (every 500 steps) never writes",
		Expect{Status: 403, Codes: []string{"RESTART_STEP_OFF_PLAN"}}, a, err))

	report, err = r.EvalReport(runID, "long_context", digest, "ito-battery-long-context-2026.10",
		map[string]float64{"ruler_32k": 0.41, "mmlu_5shot": 0.33})
	if err == nil {
		a, err = send(r.AdvanceRequest(ctx, m, runID, "sft", report))
	}
	res = check("run life: advance to sft, ruler_32k 0.41 < 0.5 halts the run (no override)",
		Expect{Status: 403, Codes: []string{"EVAL_FAILED", "EVAL_FAILED"}}, a, err)
	res.Detail = a.Notice
	add(res)

	add(r.runStatus(ctx, "run life: GET /v1/runs/{run_id} says halted, naming ruler_32k", runID,
		func(st api.RunStatus) string {
			if st.State != api.RunHalted || st.Halt == nil || !slices.Contains(st.Halt.FailedEvals, "ruler_32k") ||
				st.Restarts != 1 || st.LastCheckpointStep == nil || *st.LastCheckpointStep != 500 {
				return fmt.Sprintf("state %s, halt %+v, %d restarts (last from %v)", st.State, st.Halt, st.Restarts,
					st.LastCheckpointStep)
			}
			return ""
		}))

	a, err = send(r.RestartRequest(ctx, m, runID, 1000))
	add(check("run life: restart of the halted run", Expect{Status: 403, Codes: []string{"RUN_HALTED"}}, a, err))
	report, err = r.EvalReport(runID, "long_context", digest, "ito-battery-long-context-2026.10",
		map[string]float64{"ruler_32k": 0.62, "mmlu_5shot": 0.33})
	if err == nil {
		a, err = send(r.AdvanceRequest(ctx, m, runID, "sft", report))
	}
	add(check("run life: advance of the halted run to sft (a passing report now does not help)",
		Expect{Status: 403, Codes: []string{"RUN_HALTED"}}, a, err))

	a, err = r.Cancel(ctx, m, runID, r.Key("cancel"))
	add(check("run life: cancel", Expect{Status: 200}, a, err))
	add(r.runStatus(ctx, "run life: GET /v1/runs/{run_id} says cancelled", runID, func(st api.RunStatus) string {
		if st.State != api.RunCancelled || st.EndedBy != api.TrainCancel || len(st.Events) == 0 {
			return fmt.Sprintf("state %s ended by %q with %d events", st.State, st.EndedBy, len(st.Events))
		}
		return ""
	}))

	a, err = send(r.RestartRequest(ctx, m, runID, 1000))
	add(check("run life: restart the cancelled run", Expect{Status: 403, Codes: []string{"RUN_NOT_LIVE"}}, a, err))
	return out
}

// runStatus is a demo row that asks GET /v1/runs/{run_id} and passes when
// the answer is 200 and problem finds nothing wrong with it.
func (r *Runner) runStatus(ctx context.Context, name, runID string, problem func(api.RunStatus) string) Result {
	res := Result{Name: name, Expected: "200 run status"}
	status, env, err := r.RunStatus(ctx, runID)
	switch {
	case err != nil:
		res.Got = "error: " + err.Error()
	case status != 200:
		res.Got = fmt.Sprintf("%d", status)
		if env.Error != nil {
			res.Got += " " + string(env.Error.Code)
		}
	default:
		if p := problem(env.Data); p != "" {
			res.Got = "200 " + p
		} else {
			res.Got, res.Pass = res.Expected, true
			res.Detail = "state " + string(env.Data.State)
		}
	}
	return res
}

// RevokedLife drives a run whose entitlement is revoked after admission:
// the revoker revokes it (POST /v1/revocations), a restart of the run is
// then denied ENTITLEMENT_REVOKED although it carries a fresh entitlement,
// GET /v1/runs/{run_id} says revoked, naming the revocation, and a cancel
// is still admitted (teardown needs no consent).
func (r *Runner) RevokedLife(ctx context.Context) []Result {
	var out []Result
	add := func(res Result) { out = append(out, res) }
	m, err := r.LoadManifest("llama3-8b")
	if err != nil {
		return []Result{{Name: "revoked run: manifest", Got: err.Error()}}
	}
	jti := randomID("jti_revoked_")
	created, _, err := r.CreateWith(ctx, m, r.Key("revoked"), func(c map[string]any) { c["jti"] = jti })
	add(check("revoked run: create", Expect{Status: 200}, created, err))
	runID := created.Data.RunID
	if runID == "" {
		return out
	}

	add(r.revoke(ctx, "revoked run: the revoker revokes the entitlement it was admitted under", "entitlement", jti,
		"demo: the backend withdrew the entitlement"))

	var a Answer
	req, err := r.RestartRequest(ctx, m, runID, 500)
	if err == nil {
		a, err = r.Admit(ctx, req)
	}
	add(check("revoked run: restart from step 500 (a fresh entitlement does not help)",
		Expect{Status: 403, Codes: []string{"ENTITLEMENT_REVOKED"}}, a, err))
	add(r.runStatus(ctx, "revoked run: GET /v1/runs/{run_id} says revoked, naming the entitlement", runID,
		func(st api.RunStatus) string {
			if st.State != api.RunRevoked || st.Revocation == nil || st.Revocation.Kind != "entitlement" ||
				st.Revocation.Subject != jti || st.Restarts != 0 {
				return fmt.Sprintf("state %s, revocation %+v, %d restarts", st.State, st.Revocation, st.Restarts)
			}
			return ""
		}))

	a, err = r.Cancel(ctx, m, runID, r.Key("cancel-revoked"))
	add(check("revoked run: cancel (teardown stays admissible)", Expect{Status: 200}, a, err))
	return out
}

// DirectHaltLife drives a run whose holder never asks to advance: the eval
// authority posts a failing pretrain report for it directly (POST
// /v1/runs/{run_id}/eval-reports, the report its own credential), which
// halts it; the same report again answers the same halt; a restart is then
// denied RUN_HALTED naming the failed eval, GET /v1/runs/{run_id} says
// halted, and a cancel is admitted.
func (r *Runner) DirectHaltLife(ctx context.Context) []Result {
	var out []Result
	add := func(res Result) { out = append(out, res) }
	m, err := r.Curriculum()
	if err != nil {
		return []Result{{Name: "direct halt: manifest", Got: err.Error()}}
	}
	created, _, err := r.Create(ctx, m, r.Key("direct-halt"))
	add(check("direct halt: create", Expect{Status: 200}, created, err))
	runID := created.Data.RunID
	if runID == "" {
		return out
	}
	report, err := r.EvalReport(runID, "pretrain", manifest.Digest(m.Raw), "ito-battery-pretrain-2026.10",
		map[string]float64{"mmlu_5shot": 0.11, "hellaswag_acc": 0.42})
	for i, want := range []int{201, 200} {
		name := "direct halt: the eval authority posts a failing pretrain report (mmlu_5shot 0.11 < 0.25)"
		if i == 1 {
			name = "direct halt: the same report again answers the same halt"
		}
		res := Result{Name: name, Expected: fmt.Sprintf("%d failed, run halted", want)}
		var status int
		var env api.Envelope[api.EvalReportResult]
		if err == nil {
			status, env, err = r.PostEvalReport(ctx, runID, report, m.Raw)
		}
		switch d := env.Data; {
		case err != nil:
			res.Got = "error: " + err.Error()
		case status != want || d.Verdict != "failed" || d.State != api.RunHalted ||
			!slices.Equal(d.FailedEvals, []string{"mmlu_5shot"}):
			res.Got = fmt.Sprintf("%d %s %s %v", status, d.Verdict, d.State, d.FailedEvals)
			if env.Error != nil {
				res.Got += " " + string(env.Error.Code)
			}
		default:
			res.Got, res.Pass, res.Detail = res.Expected, true, "decision "+d.DecisionID
		}
		add(res)
	}
	var a Answer
	req, err := r.RestartRequest(ctx, m, runID, 500)
	if err == nil {
		a, err = r.Admit(ctx, req)
	}
	add(check("direct halt: restart of the halted run", Expect{Status: 403, Codes: []string{"RUN_HALTED"}}, a, err))
	add(r.runStatus(ctx, "direct halt: GET /v1/runs/{run_id} says halted, naming mmlu_5shot", runID,
		func(st api.RunStatus) string {
			if st.State != api.RunHalted || st.Halt == nil || !slices.Equal(st.Halt.FailedEvals, []string{"mmlu_5shot"}) {
				return fmt.Sprintf("state %s, halt %+v", st.State, st.Halt)
			}
			return ""
		}))
	a, err = r.Cancel(ctx, m, runID, r.Key("cancel-direct-halt"))
	add(check("direct halt: cancel (teardown stays admissible)", Expect{Status: 200}, a, err))
	return out
}
