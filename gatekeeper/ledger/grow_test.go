package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// TestCheckHeldCountsGrowsWhenTheyHappened: a run counts at what it held
// at each instant (its events), not at what it holds now. Run a (16 of 64)
// and run b (48) hold the booking whole until b is cancelled; a then grows
// to 32: sound. Without a's events, a counts at 32 beside b's 48 — which
// is why the checkers pass them. A grow while b still held its 48 is a
// violation, reported at the grow.
func TestCheckHeldCountsGrowsWhenTheyHappened(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	a := RunRecord{RunID: "run_a", GPUs: 32, BookedGPUs: 64, AdmittedAt: t0, LiveUntil: t0.Add(time.Hour)}
	b := RunRecord{RunID: "run_b", GPUs: 48, BookedGPUs: 64, AdmittedAt: t0.Add(time.Second), LiveUntil: t0.Add(time.Hour),
		EndedAt: t0.Add(2 * time.Second), EndedBy: api.TrainCancel}
	create := RunEvent{RunID: "run_a", At: t0, Action: api.TrainCreate, To: api.RunLive, GPUs: 16}
	grow := RunEvent{RunID: "run_a", At: t0.Add(time.Minute), Action: api.TrainStageAdvance, To: api.RunLive,
		DecisionID: "dec_grow", GPUs: 32}
	runs := []RunRecord{a, b}
	if p := CheckHeld(runs, map[string][]RunEvent{"run_a": {create, grow}}); len(p) != 0 {
		t.Fatalf("a sound history: %v", p)
	}
	if p := CheckHeld(runs, nil); len(p) != 1 || !strings.Contains(p[0], "at run run_b's admission 80 GPUs were held") {
		t.Fatalf("without a's events: %v, want a at 32 counted at b's admission", p)
	}
	early := grow
	early.At = t0.Add(1500 * time.Millisecond) // b still holds its 48
	p := CheckHeld(runs, map[string][]RunEvent{"run_a": {create, early}})
	if len(p) != 1 || p[0] != "when run run_a grew to 32 GPUs (decision dec_grow) 80 GPUs were held, 64 booked" {
		t.Fatalf("a grow over the booking: %v", p)
	}
	if got := HeldAt(a, []RunEvent{create, grow}, t0.Add(30*time.Second)); got != 16 {
		t.Fatalf("HeldAt before the grow = %d, want 16", got)
	}
	if got := HeldAt(a, []RunEvent{create, grow}, grow.At); got != 32 {
		t.Fatalf("HeldAt the grow = %d, want 32", got)
	}
}

// TestCheckGrow: a stage advance into a larger stage fits when the other
// live runs plus the stage's world size stay within the run's booked GPUs
// (whether or not runs lists the run itself); a smaller or equal stage, or
// a restart, never needs room.
func TestCheckGrow(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	r := RunRecord{RunID: "run_a", Account: "acct", BookingID: "bk", GPUs: 16, BookedGPUs: 64, AdmittedAt: t0,
		LiveUntil: t0.Add(time.Hour)}
	other := RunRecord{RunID: "run_b", Account: "acct", BookingID: "bk", GPUs: 32, BookedGPUs: 64, AdmittedAt: t0,
		LiveUntil: t0.Add(time.Hour)}
	adv := func(stage int) Admission {
		return Admission{Account: "acct", Action: api.TrainStageAdvance, CreatedAt: t0.Add(time.Minute), StageGPUs: stage}
	}
	for _, runs := range [][]RunRecord{{r, other}, {other}} {
		if err := CheckGrow(runs, r, adv(32)); err != nil {
			t.Fatalf("32 beside 32: %v", err)
		}
		err := CheckGrow(runs, r, adv(33))
		var ce *CapacityError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCapacityExceeded) || ce.RunID != "run_a" || ce.RunGPUs != 16 ||
			ce.StageGPUs != 33 || ce.WantGPUs != 17 || ce.HeldGPUs != 48 || ce.BookedGPUs != 64 {
			t.Fatalf("33 beside 32: %+v (%v)", ce, err)
		}
		if want := "ledger: booking capacity: run run_a grows from 16 to 33 GPUs: 48 GPUs held + 17 more > 64 booked"; err.Error() != want {
			t.Fatalf("Error() = %q, want %q", err.Error(), want)
		}
	}
	full := other
	full.GPUs = 48
	for _, a := range []Admission{adv(16), adv(8), adv(0), {Action: api.TrainRestart, CreatedAt: t0}} {
		if Grows(r, a) {
			t.Fatalf("%s into %d GPUs grows a run of 16", a.Action, a.StageGPUs)
		}
		if err := CheckGrow([]RunRecord{r, full}, r, a); err != nil {
			t.Fatalf("%s into %d GPUs on a full booking: %v", a.Action, a.StageGPUs, err)
		}
	}
	if got := Stepped(r, adv(8)).GPUs; got != 16 {
		t.Fatalf("Stepped into a smaller stage holds %d, want 16 (a run never shrinks)", got)
	}
	if got := Stepped(r, adv(32)).GPUs; got != 32 {
		t.Fatalf("Stepped into a larger stage holds %d, want 32", got)
	}
}

// TestStageGPUsValid: StageGPUs is for a stage advance only, 0 to 2^31-1.
func TestStageGPUsValid(t *testing.T) {
	a := Admission{Account: "acct", IdempotencyKey: "k", Action: api.TrainStageAdvance, ConfirmationJTI: "j",
		BookingID: "bk", RunID: NewRunID(), RequestDigest: "sha256:" + strings.Repeat("a", 64),
		ConfirmationRef: NewConfirmationRef(), State: api.StateStageAdvanced, Stage: "sft", FromStage: "pretrain",
		CreatedAt: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)}
	for _, n := range []int{0, 1, MaxGPUs} {
		a.StageGPUs = n
		if err := a.Validate(); err != nil {
			t.Fatalf("StageGPUs %d: %v", n, err)
		}
	}
	for _, n := range []int{-1, MaxGPUs + 1} {
		a.StageGPUs = n
		if err := a.Validate(); !errors.Is(err, ErrInvalid) {
			t.Fatalf("StageGPUs %d: %v, want ErrInvalid", n, err)
		}
	}
	r := a
	r.Action, r.State, r.Stage, r.FromStage, r.CheckpointStep, r.StageGPUs = api.TrainRestart, api.StateRestartAdmitted, "", "", 500, 8
	if err := r.Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("StageGPUs on a restart: %v, want ErrInvalid", err)
	}
}
