package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
)

// stageRun creates a curriculum run (pretrain → long_context → sft) whose
// stage_settings are settings and returns its manifest, run id and an
// advance into long_context with a passing pretrain eval report.
func stageRun(t *testing.T, h *harness, settings map[string]any) (scenario.Manifest, string, api.AdmissionRequest) {
	t.Helper()
	return stageRunOn(t, h, settings, 0)
}

// stageRunOn is stageRun on a booking of bookedNodes nodes (the
// scenario's when 0): the run's create and its advance present an
// entitlement for that many.
func stageRunOn(t *testing.T, h *harness, settings map[string]any, bookedNodes int64) (scenario.Manifest, string, api.AdmissionRequest) {
	t.Helper()
	ctx := context.Background()
	m, err := h.runner.CurriculumWith(settings)
	if err != nil {
		t.Fatal(err)
	}
	booked := func(c map[string]any) {
		if bookedNodes > 0 {
			c["gpu"].(map[string]any)["nodes"] = bookedNodes
		}
	}
	a, _, err := h.runner.CreateWith(ctx, m, h.runner.Key("stages"), booked)
	if err != nil || a.Status != 200 {
		t.Fatalf("create: %d %v, %v", a.Status, a.Codes(), err)
	}
	report, err := h.runner.EvalReport(a.Data.RunID, "pretrain", manifest.Digest(m.Raw),
		"ito-battery-pretrain-2026.10", map[string]float64{"mmlu_5shot": 0.31, "hellaswag_acc": 0.42})
	if err != nil {
		t.Fatal(err)
	}
	req, err := h.runner.AdvanceRequest(ctx, m, a.Data.RunID, "long_context", report)
	if err != nil {
		t.Fatal(err)
	}
	if req.EntitlementToken, err = h.runner.EntitlementFor(m, booked); err != nil {
		t.Fatal(err)
	}
	return m, a.Data.RunID, req
}

// wantNothingConsumed: a denied advance left its confirmation available,
// stored no admission under its key and left the run in pretrain.
func wantNothingConsumed(t *testing.T, h *harness, run string, req api.AdmissionRequest) {
	t.Helper()
	ctx := context.Background()
	if c, err := h.store.Confirmation(ctx, req.ConfirmationRef); err != nil || c.State != ledger.ConfirmationAvailable {
		t.Fatalf("confirmation %q, %v; want available", c.State, err)
	}
	if _, err := h.store.Admission(ctx, scenario.Account, req.IdempotencyKey); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the deny stored an admission: %v", err)
	}
	if rec, err := h.store.RunRecord(ctx, run); err != nil || rec.Stage != "pretrain" {
		t.Fatalf("run %+v, %v; want it in pretrain", rec, err)
	}
}

// An advance into long_context is judged on the stage's own settings: at
// the sequence length of the stage before it, it is denied
// STAGE_SEQUENCE_NOT_RAISED and consumes nothing; with the sequence length
// raised (and context parallel), it is admitted and recorded.
func TestStageAdvanceIntoLongContext(t *testing.T) {
	ctx := context.Background()
	t.Run("at the previous stage's sequence length", func(t *testing.T) {
		h := newHarness(t, nil)
		_, run, req := stageRun(t, h, nil)
		a, err := h.runner.Admit(ctx, req)
		wantAnswer(t, "advance", a, err, 403, "STAGE_SEQUENCE_NOT_RAISED")
		wantNothingConsumed(t, h, run, req)
	})
	t.Run("with a raised sequence length", func(t *testing.T) {
		h := newHarness(t, nil)
		_, run, req := stageRun(t, h, map[string]any{"long_context": scenario.LongContextSettings})
		a, err := h.runner.Admit(ctx, req)
		wantAnswer(t, "advance", a, err, 200)
		if rec, err := h.store.RunRecord(ctx, run); err != nil || rec.Stage != "long_context" {
			t.Fatalf("run %+v, %v; want long_context", rec, err)
		}
	})
}

// An advance into a stage whose layout does not fit memory is denied with
// the parallelism gate's code, message and fix, exactly as a train.create
// of the stage's effective manifest is, and consumes nothing.
func TestStageAdvanceLayoutDoesNotFit(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, nil)
	m, run, req := stageRun(t, h, map[string]any{"long_context": map[string]any{
		"objective":   map[string]any{"sequence_length": 131072},
		"parallelism": map[string]any{"activation_checkpointing": "none"},
	}})
	adv, err := h.runner.Admit(ctx, req)
	wantAnswer(t, "advance", adv, err, 403, "MEMORY_ESTIMATE_EXCEEDS_GPU")
	wantNothingConsumed(t, h, run, req)

	// the stage's effective manifest as the first stage of a new run
	var doc map[string]any
	if err := json.Unmarshal(m.Raw, &doc); err != nil {
		t.Fatal(err)
	}
	eff := trainfacts.StageManifest(doc, "long_context")
	delete(eff, "stages")
	eff["objective"].(map[string]any)["stage"] = "pretrain"
	eff["eval_gates"] = []any{doc["eval_gates"].([]any)[0]}
	eff["name"] = "llama3-8b-long-context"
	raw, err := json.Marshal(eff)
	if err != nil {
		t.Fatal(err)
	}
	created, err := h.runner.SignManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	cre, _, err := h.runner.Create(ctx, created, h.runner.Key("stage-as-run"))
	wantAnswer(t, "create", cre, err, 403, "MEMORY_ESTIMATE_EXCEEDS_GPU")
	if got, want := adv.Error.Violations, cre.Error.Violations; !reflect.DeepEqual(got, want) || want[0].Fix == "" {
		t.Fatalf("the advance's violations\n %+v\ndiffer from the create's\n %+v", got, want)
	}
}

// A stage may take more GPUs than its run holds only when the booking has
// the difference free: on a booking of exactly the run's 8 nodes, an
// advance into a stage of 16 is denied STAGE_WORLD_SIZE_EXCEEDS_RUN naming
// the figures and consumes nothing.
func TestStageAdvanceWorldSizeExceedsRun(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, nil)
	_, run, req := stageRunOn(t, h, map[string]any{"long_context": sixteenNodes}, 8)
	a, err := h.runner.Admit(ctx, req)
	wantAnswer(t, "advance", a, err, 403, "STAGE_WORLD_SIZE_EXCEEDS_RUN")
	if got, want := a.Error.Violations[0].Message,
		"stage \"long_context\" needs 128 GPUs (16 nodes × 8); the run holds 64 and the booking has 0 free "+
			"(64 booked, 64 held by live runs)"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	wantNothingConsumed(t, h, run, req)
}

// sixteenNodes are long_context settings at twice the curriculum's 8 nodes.
var sixteenNodes = map[string]any{
	"objective":   map[string]any{"sequence_length": 32768},
	"hardware":    map[string]any{"nodes": 16},
	"parallelism": map[string]any{"context": 4, "data": 32},
}

// TestStageAdvanceGrowsTheRun, through HTTP: on a booking of 16 nodes (128
// GPUs) held whole by two runs of 64, an advance of the first into a stage
// of 16 nodes is denied STAGE_WORLD_SIZE_EXCEEDS_RUN naming 0 free, and
// consumes nothing. Once the other run is cancelled the very same request
// is admitted and the run grows to 128 GPUs: GET /v1/runs/{run_id} shows
// them (and the event that set them), the booking's usage counts them, a
// renewed ticket carries world_size 128 on 16 nodes, the scheduler's
// online check names them; a create on the booking then finds no room.
func TestStageAdvanceGrowsTheRun(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, nil)
	booked := func(c map[string]any) { c["gpu"].(map[string]any)["nodes"] = 16 }
	m, run, req := stageRunOn(t, h, map[string]any{"long_context": sixteenNodes}, 16)
	other, _, err := h.runner.CreateWith(ctx, m, h.runner.Key("other"), booked)
	if err != nil || other.Status != 200 {
		t.Fatalf("second run: %d %v, %v", other.Status, other.Codes(), err)
	}
	a, err := h.runner.Admit(ctx, req)
	wantAnswer(t, "advance on a full booking", a, err, 403, "STAGE_WORLD_SIZE_EXCEEDS_RUN")
	if got, want := a.Error.Violations[0].Message,
		"stage \"long_context\" needs 128 GPUs (16 nodes × 8); the run holds 64 and the booking has 0 free "+
			"(128 booked, 128 held by live runs)"; got != want {
		t.Fatalf("message %q, want %q", got, want)
	}
	wantNothingConsumed(t, h, run, req)

	cancelRun(t, h, m, other.Data.RunID)
	a, err = h.runner.Admit(ctx, req)
	wantAnswer(t, "advance once the other run is cancelled", a, err, 200)
	rec, err := h.store.RunRecord(ctx, run)
	if err != nil || rec.GPUs != 128 || rec.Stage != "long_context" {
		t.Fatalf("run %+v, %v; want 128 GPUs in long_context", rec, err)
	}
	if u, err := h.store.BookingUsage(ctx, scenario.Booking, time.Now()); err != nil || u.HeldGPUs != 128 {
		t.Fatalf("booking usage %+v, %v; want 128 held", u, err)
	}

	status, st, err := h.runner.RunStatus(ctx, run)
	if err != nil || status != 200 || st.Data.GPUs != 128 || st.Data.Stage != "long_context" || len(st.Data.Events) != 2 {
		t.Fatalf("GET /v1/runs/%s: %d %+v, %v; want 128 GPUs in long_context after 2 events", run, status, st.Data, err)
	}
	if first, grew := st.Data.Events[0], st.Data.Events[1]; first.GPUs != 64 || grew.Action != api.TrainStageAdvance ||
		grew.GPUs != 128 || grew.DecisionID != a.Data.DecisionID {
		t.Fatalf("events %+v; want the create's 64 GPUs, then the advance %s's 128", st.Data.Events, a.Data.DecisionID)
	}

	status, renewed := renew(t, h, run, must(h.runner.CallerToken()))
	if status != 200 || renewed.Data.Ticket == "" {
		t.Fatalf("renewal: %d %+v", status, renewed.Error)
	}
	c, _, err := devTicketVerifier(t).VerifyAllowExpired([]byte(renewed.Data.Ticket), time.Now())
	if err != nil || c.WorldSize != 128 || c.Nodes != 16 || c.GPUsPerNode != 8 || c.RunID != run {
		t.Fatalf("renewed ticket %+v, %v; want world_size 128 on 16 nodes of 8", c, err)
	}
	status, live := check(t, h, renewed.Data.Ticket, "")
	if status != 200 || !live.Data.Live || live.Data.GPUs != 128 {
		t.Fatalf("online check: %d %+v %+v; want live with 128 GPUs", status, live.Data, live.Error)
	}

	full, _, err := h.runner.CreateWith(ctx, m, h.runner.Key("no-room"), booked)
	wantAnswer(t, "create beside the grown run", full, err, 403, "BOOKING_CAPACITY_EXCEEDED")
}
