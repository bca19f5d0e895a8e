package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/token"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

// The eval authority's direct post, POST /v1/runs/{run_id}/eval-reports.

const pretrainBattery = "ito-battery-pretrain-2026.10"

// failingPretrain is an eval report of run's pretrain stage whose
// mmlu_5shot (0.11) is below the battery's 0.25.
func failingPretrain(t *testing.T, h *harness, run string, m []byte) string {
	t.Helper()
	return must(h.runner.EvalReport(run, "pretrain", manifest.Digest(m), pretrainBattery,
		map[string]float64{"mmlu_5shot": 0.11, "hellaswag_acc": 0.42}))
}

func postReport(t *testing.T, h *harness, run, report string, raw []byte) (int, api.Envelope[api.EvalReportResult]) {
	t.Helper()
	status, env, err := h.runner.PostEvalReport(context.Background(), run, report, raw)
	if err != nil {
		t.Fatal(err)
	}
	return status, env
}

// ledgerOf is the run's record and events as the ledger holds them.
func ledgerOf(t *testing.T, h *harness, run string) (ledger.RunRecord, []ledger.RunEvent) {
	t.Helper()
	rec, err := h.store.RunRecord(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	events, err := h.store.RunEvents(context.Background(), run)
	if err != nil {
		t.Fatal(err)
	}
	return rec, events
}

func reportDigest(report string) string {
	sum := sha256.Sum256([]byte(report))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestDirectFailingReportHaltsTheRun: a failing report posted by the eval
// authority halts a live run whose holder never asked to advance: one halt
// event naming the failed eval and the authority's key, nothing consumed;
// the same report again answers the same halt and writes nothing; then a
// restart, an advance and a ticket renewal are refused RUN_HALTED naming
// mmlu_5shot, a passing report is refused with the run state's code, and a
// cancel is admitted.
func TestDirectFailingReportHaltsTheRun(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, run, passing := lifeRun(t, h)
	failing := failingPretrain(t, h, run, m.Raw)

	status, env := postReport(t, h, run, failing, m.Raw)
	want := api.EvalReportResult{RunID: run, Stage: "pretrain", Verdict: "failed", FailedEvals: []string{"mmlu_5shot"},
		ReportDigest: reportDigest(failing), State: api.RunHalted, Created: true}
	got := env.Data
	want.DecisionID, want.RecordedAt = got.DecisionID, got.RecordedAt
	if status != http.StatusCreated || !env.OK || !reflect.DeepEqual(got, want) || !strings.HasPrefix(got.DecisionID, "dec_") {
		t.Fatalf("post = %d %+v (error %+v), want 201 %+v", status, got, env.Error, want)
	}
	rec, events := ledgerOf(t, h, run)
	if rec.State(time.Now()) != api.RunHalted || rec.Halt.DecisionID != got.DecisionID || rec.Halt.Stage != "pretrain" ||
		!slices.Equal(rec.Halt.FailedEvals, []string{"mmlu_5shot"}) || rec.Halt.ReportDigest != want.ReportDigest ||
		rec.Halt.By != "evals:"+keys.Dev().Evals.KeyID || len(events) != 2 || events[1].To != api.RunHalted ||
		events[1].DecisionID != got.DecisionID {
		t.Fatalf("ledger after the post: %+v, events %+v", rec, events)
	}

	status, again := postReport(t, h, run, failing, m.Raw)
	want.Created = false
	if status != http.StatusOK || !reflect.DeepEqual(again.Data, want) {
		t.Fatalf("the same report again = %d %+v, want 200 %+v", status, again.Data, want)
	}
	if _, after := ledgerOf(t, h, run); len(after) != 2 {
		t.Fatalf("the repeat wrote events: %+v", after)
	}

	a, err := h.runner.Admit(ctx, must(h.runner.RestartRequest(ctx, m, run, 500)))
	wantAnswer(t, "restart of the halted run", a, err, 403, api.CodeRunHalted)
	if !strings.Contains(a.Error.Message, "mmlu_5shot") {
		t.Fatalf("restart refusal %q does not name the failed eval", a.Error.Message)
	}
	a, err = h.runner.Admit(ctx, must(h.runner.AdvanceRequest(ctx, m, run, "long_context", passing)))
	wantAnswer(t, "advance of the halted run", a, err, 403, api.CodeRunHalted)
	if !strings.Contains(a.Error.Message, "mmlu_5shot") {
		t.Fatalf("advance refusal %q does not name the failed eval", a.Error.Message)
	}
	renew := renewTicket(t, h, run)
	if renew.status != http.StatusForbidden || renew.code != api.CodeRunHalted || !strings.Contains(renew.message, "mmlu_5shot") {
		t.Fatalf("ticket renewal of the halted run = %+v", renew)
	}
	status, late := postReport(t, h, run, passing, m.Raw)
	if status != http.StatusForbidden || late.Error == nil || late.Error.Code != api.CodeRunHalted {
		t.Fatalf("a passing report for the halted run = %d %+v", status, late.Error)
	}
	if _, after := ledgerOf(t, h, run); len(after) != 2 {
		t.Fatalf("the refusals wrote events: %+v", after)
	}
	cancelRun(t, h, m, run)
}

// TestDirectPassingReportChangesNothing: a passing report leaves the run
// live in its stage; it is recorded as the stage's report (one event, the
// same report again writes nothing); the holder still advances with a
// report of its own, after which the old stage's report no longer binds.
func TestDirectPassingReportChangesNothing(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, run, passing := lifeRun(t, h)
	status, env := postReport(t, h, run, passing, m.Raw)
	if d := env.Data; status != http.StatusCreated || d.Verdict != "passed" || d.State != api.RunLive ||
		len(d.FailedEvals) != 0 || !d.Created || d.Stage != "pretrain" {
		t.Fatalf("post = %d %+v (%+v), want 201 passed, live", status, d, env.Error)
	}
	rec, events := ledgerOf(t, h, run)
	if rec.State(time.Now()) != api.RunLive || rec.Stage != "pretrain" || !rec.Halt.At.IsZero() ||
		rec.Report.DecisionID != env.Data.DecisionID || len(events) != 2 || events[1].To != api.RunLive ||
		events[1].Action != "" {
		t.Fatalf("ledger after a passing report: %+v, events %+v", rec, events)
	}
	if status, again := postReport(t, h, run, passing, m.Raw); status != http.StatusOK || again.Data.DecisionID != env.Data.DecisionID {
		t.Fatalf("the same report again = %d %+v", status, again.Data)
	}
	a, err := h.runner.Admit(ctx, must(h.runner.AdvanceRequest(ctx, m, run, "long_context", passing)))
	wantAnswer(t, "advance after a passing report", a, err, 200)
	status, stale := postReport(t, h, run, passing, m.Raw)
	if status != http.StatusForbidden || stale.Error == nil || stale.Error.Code != api.CodeEvalReportMismatch {
		t.Fatalf("the pretrain report after the advance = %d %+v", status, stale.Error)
	}
	if rec, _ := ledgerOf(t, h, run); rec.Stage != "long_context" || !rec.Report.At.IsZero() {
		t.Fatalf("run after the advance: %+v", rec)
	}
}

// TestDirectReportRefusals: a report for another run, stage, manifest or
// battery, another manifest's bytes, a forged or expired report, one
// signed with any other purpose's key (a caller's bearer beside it changes
// nothing), a ladder decision and malformed requests are each refused with
// their code, and the ledger is unchanged.
func TestDirectReportRefusals(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	m, run, _ := lifeRun(t, h)
	other, otherRun, _ := lifeRun(t, h) // the same curriculum manifest
	llama := must(h.runner.LoadManifest("llama3-8b"))
	digest := manifest.Digest(m.Raw)
	d := keys.Dev()
	mint := func(k keys.Key, exp time.Duration, change map[string]any) string {
		now := time.Now()
		claims := map[string]any{"iss": trust.DevEvalsIssuer, "aud": trust.DevEvalsAudience, "sub": "eval-authority",
			"jti": "j-" + ledger.NewConfirmationRef(), "iat": now.Add(-time.Minute).Unix(), "exp": now.Add(exp).Unix(),
			"kind": "eval_report", "run_id": run, "stage": "pretrain", "manifest_digest": digest,
			"battery_id": pretrainBattery, "results": map[string]any{"mmlu_5shot": 0.11, "hellaswag_acc": 0.42}}
		for k, v := range change {
			claims[k] = v
		}
		return string(must(token.Mint(k.Private, k.KeyID, k.Algorithm, config.TypeEvals, claims)))
	}
	unknown := ledger.NewRunID()
	type tc struct {
		path, report string
		raw          []byte
		status       int
		code         api.Code
	}
	cases := map[string]tc{
		"another run's report": {run, failingPretrain(t, h, otherRun, other.Raw), m.Raw, 403, api.CodeEvalReportMismatch},
		"an unknown run":       {unknown, mint(d.Evals, time.Minute, map[string]any{"run_id": unknown}), m.Raw, 404, api.CodeRunStatusNotFound},
		"another stage":        {run, mint(d.Evals, time.Minute, map[string]any{"stage": "long_context"}), m.Raw, 403, api.CodeEvalReportMismatch},
		"another manifest digest": {run, mint(d.Evals, time.Minute, map[string]any{"manifest_digest": manifest.Digest(llama.Raw)}),
			m.Raw, 403, api.CodeEvalReportMismatch},
		"another battery": {run, mint(d.Evals, time.Minute, map[string]any{"battery_id": "ito-battery-sft-2026.10"}), m.Raw,
			403, api.CodeEvalReportMismatch},
		"another manifest's bytes": {run, mint(d.Evals, time.Minute, nil), llama.Raw, 403, api.CodeRunManifestMismatch},
		"a ladder decision":        {run, mint(d.Evals, time.Minute, map[string]any{"kind": "ladder_decision"}), m.Raw, 403, api.CodeEvalReportMismatch},
		"expired (past any leeway)": {run, mint(d.Evals, -10*time.Minute,
			map[string]any{"iat": time.Now().Add(-20 * time.Minute).Unix()}), m.Raw, 401, api.CodeEvalReportUnauthorized},
		"not a token":              {run, "not.a.token", m.Raw, 401, api.CodeEvalReportUnauthorized},
		"no report":                {run, "", m.Raw, 400, api.CodeRequestInvalid},
		"no manifest":              {run, mint(d.Evals, time.Minute, nil), []byte{}, 400, api.CodeManifestRequired},
		"a path that is no run id": {"run_x", mint(d.Evals, time.Minute, nil), m.Raw, 400, api.CodeRequestInvalid},
	}
	for _, k := range d.All() {
		if k.KeyID != d.Evals.KeyID {
			cases["signed with the "+k.KeyID+" key"] = tc{run, mint(k, time.Minute, nil), m.Raw, 401, api.CodeEvalReportUnauthorized}
		}
	}
	before, beforeEvents := ledgerOf(t, h, run)
	for name, c := range cases {
		status, env := postReport(t, h, c.path, c.report, c.raw)
		if status != c.status || env.Error == nil || env.Error.Code != c.code {
			t.Errorf("%s: %d %+v, want %d %s", name, status, env.Error, c.status, c.code)
		}
	}
	// A caller's bearer beside a forged report authenticates nothing.
	caller := must(h.runner.CallerToken())
	status, body, err := h.runner.Post(ctx, "/v1/runs/"+run+"/eval-reports", caller, map[string]any{
		"eval_report": mint(d.Caller, time.Minute, nil), "manifest": m.Raw})
	if err != nil || status != 401 || !strings.Contains(body, string(api.CodeEvalReportUnauthorized)) {
		t.Fatalf("a caller's bearer with a report signed by the caller key = %d %s %v", status, body, err)
	}
	after, afterEvents := ledgerOf(t, h, run)
	if !after.Equal(before) || len(afterEvents) != len(beforeEvents) {
		t.Fatalf("the refusals changed the run: %+v (events %+v), was %+v", after, afterEvents, before)
	}
	if o, _ := ledgerOf(t, h, otherRun); o.State(time.Now()) != api.RunLive {
		t.Fatalf("the other run is %s", o.State(time.Now()))
	}
}

// TestReportDeadline: with a bundle whose pretrain stage must report within
// 240 s, a create records the deadline; a passing report in time keeps the
// run live past it (a restart is admitted), while a run without one is
// halted from the deadline on: a restart, a ticket renewal and a late
// report are refused EVAL_REPORT_OVERDUE naming the stage, its status says
// halted and report_overdue, and a cancel is admitted. An advance into a
// stage without a deadline leaves none. The service's clock is moved past
// the deadline; nothing waits for it.
func TestReportDeadline(t *testing.T) {
	fsys := bundletest.Edited(t, policies.Bundle(), "ito/config/lifecycle/data.json",
		`"id": "ito-battery-pretrain-2026.10",`, `"id": "ito-battery-pretrain-2026.10", "report_deadline_seconds": 240,`)
	engine, err := policy.New(context.Background(), policy.Options{Deadline: patience.Deadline, Bundle: fsys})
	if err != nil {
		t.Fatal(err)
	}
	var offset atomic.Int64
	h := newHarness(t, func(o *admission.Options) {
		o.Policy = func() admission.Decider { return engine }
		o.Now = func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	})
	// The requests' tokens (the entitlement's 300 s freshness is judged at
	// the admission's clock) are minted at the admission's clock, so they are
	// as fresh after the jump as in real time however long the machine
	// stalls; bearer tokens stay on the real clock the server checks them by.
	atService := func(mint func() (api.AdmissionRequest, error)) api.AdmissionRequest {
		h.runner.SetClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
		defer h.runner.SetClock(time.Now)
		return must(mint())
	}
	ctx := context.Background()
	m, inTime, passing := lifeRun(t, h)
	_, late, _ := lifeRun(t, h)
	for _, run := range []string{inTime, late} {
		status, env, err := h.runner.RunStatus(ctx, run)
		if err != nil || status != 200 || env.Data.ReportDue != env.Data.AdmittedAt+240 || env.Data.ReportOverdue {
			t.Fatalf("status of %s = %d %+v %v; want its report due 240 s after its admission", run, status, env.Data, err)
		}
	}
	if status, env := postReport(t, h, inTime, passing, m.Raw); status != http.StatusCreated || env.Data.Verdict != "passed" {
		t.Fatalf("report in time = %d %+v %+v", status, env.Data, env.Error)
	}
	lateReport := must(h.runner.EvalReport(late, "pretrain", manifest.Digest(m.Raw), pretrainBattery,
		map[string]float64{"mmlu_5shot": 0.31, "hellaswag_acc": 0.42}))

	offset.Store(int64(241 * time.Second))
	a, err := h.runner.Admit(ctx, atService(func() (api.AdmissionRequest, error) { return h.runner.RestartRequest(ctx, m, inTime, 500) }))
	wantAnswer(t, "restart of the run that reported in time", a, err, 200)

	before, beforeEvents := ledgerOf(t, h, late)
	a, err = h.runner.Admit(ctx, atService(func() (api.AdmissionRequest, error) { return h.runner.RestartRequest(ctx, m, late, 500) }))
	wantAnswer(t, "restart of the overdue run", a, err, 403, api.CodeEvalReportOverdue)
	if !strings.Contains(a.Error.Message, "stage pretrain") {
		t.Fatalf("overdue refusal %q does not name the stage", a.Error.Message)
	}
	if renew := renewTicket(t, h, late); renew.status != 403 || renew.code != api.CodeEvalReportOverdue ||
		!strings.Contains(renew.message, "stage pretrain") {
		t.Fatalf("ticket renewal of the overdue run = %+v", renew)
	}
	if status, env := postReport(t, h, late, lateReport, m.Raw); status != 403 || env.Error == nil ||
		env.Error.Code != api.CodeEvalReportOverdue {
		t.Fatalf("a late passing report = %d %+v", status, env.Error)
	}
	status, env, err := h.runner.RunStatus(ctx, late)
	if err != nil || status != 200 || env.Data.State != api.RunHalted || !env.Data.ReportOverdue || env.Data.Halt != nil {
		t.Fatalf("status of the overdue run = %d %+v %v", status, env.Data, err)
	}
	after, afterEvents := ledgerOf(t, h, late)
	if !after.Equal(before) || len(afterEvents) != len(beforeEvents) {
		t.Fatalf("the refusals changed the overdue run: %+v, was %+v", after, before)
	}
	cancelRun(t, h, m, late)

	a, err = h.runner.Admit(ctx, atService(func() (api.AdmissionRequest, error) {
		return h.runner.AdvanceRequest(ctx, m, inTime, "long_context", passing)
	}))
	wantAnswer(t, "advance into long_context (no deadline)", a, err, 200)
	if rec, _ := ledgerOf(t, h, inTime); !rec.ReportDue.IsZero() || !rec.Report.At.IsZero() {
		t.Fatalf("run after the advance: %+v", rec)
	}
}

type renewal struct {
	status  int
	code    api.Code
	message string
}

// renewTicket asks POST /v1/runs/{run_id}/ticket as the demo caller.
func renewTicket(t *testing.T, h *harness, run string) renewal {
	t.Helper()
	status, body, err := h.runner.Post(context.Background(), "/v1/runs/"+run+"/ticket", must(h.runner.CallerToken()), map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	var env api.Envelope[map[string]any]
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		t.Fatalf("renewal: not an envelope: %s", body)
	}
	r := renewal{status: status}
	if env.Error != nil {
		r.code, r.message = env.Error.Code, env.Error.Message
	}
	return r
}
