package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/trust"
)

// lifeRun creates the curriculum run (pretrain → long_context → sft) and
// returns its manifest, run id and a passing pretrain eval report.
func lifeRun(t *testing.T, h *harness) (scenario.Manifest, string, string) {
	t.Helper()
	ctx := context.Background()
	m, err := h.runner.Curriculum()
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := h.runner.Create(ctx, m, h.runner.Key("life"))
	if err != nil || a.Status != 200 {
		t.Fatalf("create: %+v, %v", a, err)
	}
	report, err := h.runner.EvalReport(a.Data.RunID, "pretrain", manifest.Digest(m.Raw),
		"ito-battery-pretrain-2026.10", map[string]float64{"mmlu_5shot": 0.31, "hellaswag_acc": 0.42})
	if err != nil {
		t.Fatal(err)
	}
	return m, a.Data.RunID, report
}

func wantAnswer(t *testing.T, what string, a scenario.Answer, err error, status int, codes ...api.Code) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	got := a.Codes()
	if a.Status != status || len(got) != len(codes) {
		t.Fatalf("%s: HTTP %d %v, want %d %v", what, a.Status, got, status, codes)
	}
	for i := range codes {
		if got[i] != string(codes[i]) {
			t.Fatalf("%s: HTTP %d %v, want %d %v", what, a.Status, got, status, codes)
		}
	}
}

// An advance that passes is recorded: the ledger's stage moves, the same
// request again is its stored allow, and the stage the run left cannot be
// left again.
func TestStageAdvanceRecordsTheStage(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, run, report := lifeRun(t, h)
	req, err := h.runner.AdvanceRequest(ctx, m, run, "long_context", report)
	if err != nil {
		t.Fatal(err)
	}
	a, err := h.runner.Admit(ctx, req)
	wantAnswer(t, "advance", a, err, 200)
	if a.Data.State != "stage_advanced" || a.Data.RunID != run {
		t.Fatalf("advance answered state %q run %q", a.Data.State, a.Data.RunID)
	}
	rec, err := h.store.RunRecord(ctx, run)
	if err != nil || rec.Stage != "long_context" {
		t.Fatalf("ledger stage %+v, %v; want long_context", rec, err)
	}
	again, err := h.runner.Admit(ctx, req)
	wantAnswer(t, "same advance again", again, err, 200)
	if again.Data.DecisionID != a.Data.DecisionID {
		t.Fatal("the replay is not the stored allow")
	}
	// Back to long_context from pretrain with the same (still valid) report:
	// the run is no longer in pretrain, so the report ends the wrong stage
	// and lacks the long_context battery.
	back, err := h.runner.AdvanceRequest(ctx, m, run, "long_context", report)
	if err != nil {
		t.Fatal(err)
	}
	a, err = h.runner.Admit(ctx, back)
	wantAnswer(t, "advance again from the stage it left", a, err, 403,
		"EVAL_REPORT_BINDING_MISMATCH", "EVAL_REPORT_BINDING_MISMATCH",
		"EVAL_RESULT_MISSING", "EVAL_RESULT_MISSING", "STAGE_NOT_NEXT")
}

// Two advances of one run racing with their own confirmations: the policy
// allows both (each read pretrain), the ledger commits exactly one.
func TestConcurrentStageAdvancesCommitOnce(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, run, report := lifeRun(t, h)
	const n = 8
	reqs := make([]api.AdmissionRequest, n)
	for i := range reqs {
		var err error
		if reqs[i], err = h.runner.AdvanceRequest(ctx, m, run, "long_context", report); err != nil {
			t.Fatal(err)
		}
	}
	answers := make([]scenario.Answer, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() { answers[i], errs[i] = h.runner.Admit(ctx, reqs[i]) })
	}
	wg.Wait()
	allowed := 0
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch codes := a.Codes(); {
		case a.Status == 200:
			allowed++
		case a.Status == 409 && len(codes) == 1 && codes[0] == string(api.CodeStageConflict):
		case a.Status == 403 && len(codes) == 5 && codes[4] == "STAGE_NOT_NEXT":
			// evaluated after the winner committed
		default:
			t.Fatalf("advance %d: HTTP %d %v", i, a.Status, codes)
		}
	}
	if allowed != 1 {
		t.Fatalf("%d advances committed, want exactly 1", allowed)
	}
}

// Eval reports verify with the eval authority's keys only, and not at all
// without one.
func TestEvalReportTrust(t *testing.T) {
	ctx := context.Background()
	t.Run("signed with the confirmation key", func(t *testing.T) {
		h := newHarness(t, nil)
		m, run, _ := lifeRun(t, h)
		d := keys.Dev()
		now := time.Now().Unix()
		forged, err := token.Mint(d.Confirmation.Private, d.Confirmation.KeyID, d.Confirmation.Algorithm,
			config.TypeEvals, map[string]any{
				"iss": trust.DevEvalsIssuer, "aud": trust.DevEvalsAudience, "sub": "x", "jti": "j1",
				"iat": now, "exp": now + 300, "kind": "eval_report", "run_id": run, "stage": "pretrain",
				"manifest_digest": manifest.Digest(m.Raw), "battery_id": "ito-battery-pretrain-2026.10",
				"results": map[string]any{"mmlu_5shot": 0.9, "hellaswag_acc": 0.9},
			})
		if err != nil {
			t.Fatal(err)
		}
		a, err := h.runner.Admit(ctx, must(h.runner.AdvanceRequest(ctx, m, run, "long_context", string(forged))))
		wantAnswer(t, "forged report", a, err, 403, api.CodeEvalReportInvalid)
	})
	t.Run("no eval authority configured", func(t *testing.T) {
		h := newHarness(t, func(o *admission.Options) { o.Evals = nil })
		m, run, report := lifeRun(t, h)
		a, err := h.runner.Admit(ctx, must(h.runner.AdvanceRequest(ctx, m, run, "long_context", report)))
		wantAnswer(t, "no trust.evals", a, err, 403, api.CodeEvalReportInvalid)
		if rec, err := h.store.RunRecord(ctx, run); err != nil || rec.Stage != "pretrain" {
			t.Fatalf("ledger stage %+v, %v; want pretrain", rec, err)
		}
	})
	t.Run("another manifest", func(t *testing.T) {
		h := newHarness(t, nil)
		_, run, report := lifeRun(t, h)
		other, err := h.runner.LoadManifest("llama3-8b")
		if err != nil {
			t.Fatal(err)
		}
		a, err := h.runner.Admit(ctx, must(h.runner.AdvanceRequest(ctx, other, run, "long_context", report)))
		wantAnswer(t, "advance with the fixture's manifest", a, err, 403,
			"EVAL_REPORT_BINDING_MISMATCH", "RUN_MANIFEST_MISMATCH")
	})
}

// A restart needs its own train.restart confirmation for the step, used once.
func TestRestartConfirmation(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, run, _ := lifeRun(t, h)
	req := must(h.runner.RestartRequest(ctx, m, run, 500))
	a, err := h.runner.Admit(ctx, req)
	wantAnswer(t, "restart", a, err, 200)
	if a.Data.State != "restart_admitted" {
		t.Fatalf("state %q", a.Data.State)
	}
	again := req
	again.IdempotencyKey = h.runner.Key("restart-again")
	a, err = h.runner.Admit(ctx, again)
	wantAnswer(t, "the restart confirmation again", a, err, 403, "CONFIRMATION_REPLAYED")

	other := must(h.runner.RestartRequest(ctx, m, run, 500))
	other.CheckpointStep = new(int64(1000))
	a, err = h.runner.Admit(ctx, other)
	wantAnswer(t, "another step than confirmed", a, err, 403, "CONFIRMATION_CHECKPOINT_MISMATCH")
}

// A restart from step 0 is a restart from step 0: the request carries
// "checkpoint_step":0 and the server judges step 0 against the run's
// checkpoint plan (which never writes step 0: RESTART_STEP_OFF_PLAN). A
// restart without a step is refused as malformed, never read as step 0.
// Neither is recorded.
func TestRestartFromStepZero(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, run, _ := lifeRun(t, h)
	req := must(h.runner.RestartRequest(ctx, m, run, 0))
	body, _ := json.Marshal(req)
	if !strings.Contains(string(body), `"checkpoint_step":0`) {
		t.Fatalf("the request does not carry step 0: %s", body)
	}
	none := req
	none.CheckpointStep, none.IdempotencyKey = nil, h.runner.Key("restart-no-step")
	a, err := h.runner.Admit(ctx, none)
	wantAnswer(t, "restart without a step", a, err, 400, api.CodeRequestInvalid)
	a, err = h.runner.Admit(ctx, req)
	wantAnswer(t, "restart from step 0", a, err, 403, api.CodeRestartStepOffPlan)
	if msg := a.Error.Violations[0].Message; !strings.Contains(msg, "step 0") {
		t.Errorf("the denial does not name step 0: %q", msg)
	}
	status, env, err := h.runner.RunStatus(ctx, run)
	if err != nil || status != http.StatusOK || env.Data.Restarts != 0 || env.Data.LastCheckpointStep != nil {
		t.Fatalf("run status after the refusals: %d %+v %v", status, env.Data, err)
	}
}

// Fields only the run's life uses are refused elsewhere, before anything is
// verified or written.
func TestLifecycleFieldsValidated(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, run, report := lifeRun(t, h)
	for name, tweak := range map[string]func(*api.AdmissionRequest){
		"stage on a restart":          func(r *api.AdmissionRequest) { r.Stage = "sft" },
		"eval reports on a restart":   func(r *api.AdmissionRequest) { r.EvalReports = []string{report} },
		"negative checkpoint step":    func(r *api.AdmissionRequest) { r.CheckpointStep = new(int64(-1)) },
		"restart without a step":      func(r *api.AdmissionRequest) { r.CheckpointStep = nil },
		"restart without a run":       func(r *api.AdmissionRequest) { r.RunID = "" },
		"restart carrying a manifest": func(r *api.AdmissionRequest) { r.Manifest, r.ManifestSignature = m.Raw, m.Signature },
		"advance without a stage":     func(r *api.AdmissionRequest) { r.Action, r.CheckpointStep = "train.stage.advance", nil },
		"advance without its manifest": func(r *api.AdmissionRequest) {
			r.Action, r.Stage, r.CheckpointStep = "train.stage.advance", "sft", nil
		},
		// An explicit 0 is a step, never taken for none.
		"advance with checkpoint step 0": func(r *api.AdmissionRequest) {
			r.Action, r.Stage, r.Manifest, r.ManifestSignature = "train.stage.advance", "sft", m.Raw, m.Signature
			r.CheckpointStep = new(int64(0))
		},
	} {
		req := must(h.runner.RestartRequest(ctx, m, run, 500))
		tweak(&req)
		a, err := h.runner.Admit(ctx, req)
		wantAnswer(t, name, a, err, 400, api.CodeRequestInvalid)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
