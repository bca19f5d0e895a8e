package ledgertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// The run's stage: recorded by train.create on its RunRecord, moved one
// step by each train.stage.advance, never backwards and never by two racing
// advances; a restart or advance needs a live run.

// createWithStage commits a train.create on bk_01 whose run starts in stage.
func (f *fixture) createWithStage(key, stage string) ledger.Admission {
	f.t.Helper()
	a := f.create("acct_42", "bk_01", key, 1, 1<<20)
	a.Stage = stage
	return f.commit(a)
}

// runStep returns a train.stage.advance (from → to) or, with from == "",
// a train.restart of run, with a deposited confirmation bound to it.
func (f *fixture) runStep(run, key, from, to string) ledger.Admission {
	f.t.Helper()
	return f.runStepOn("bk_01", run, key, from, to)
}

// runStepOn is runStep of a run on booking.
func (f *fixture) runStepOn(booking, run, key, from, to string) ledger.Admission {
	f.t.Helper()
	action := api.TrainStageAdvance
	if from == "" {
		action = api.TrainRestart
	}
	a := f.lifecycle("acct_42", action, booking, run, key, base.Add(3*time.Second))
	a.RunID, a.ManifestDigest = run, ""
	if from == "" {
		a.State, a.CheckpointStep = api.StateRestartAdmitted, 500
		return a
	}
	a.State, a.FromStage, a.Stage = api.StateStageAdvanced, from, to
	return a
}

func (f *fixture) wantStage(run, want string) {
	f.t.Helper()
	got, err := f.s.RunRecord(f.ctx, run)
	if err != nil || got.Stage != want {
		f.t.Fatalf("RunRecord(%s) = %+v, %v; want stage %q", run, got, err, want)
	}
}

// wantNothingOnRun: an admission acting on an existing run wrote nothing:
// no admission under its key, its confirmation still available.
func (f *fixture) wantNothingOnRun(a ledger.Admission) {
	f.t.Helper()
	f.wantNoAdmission(a.Account, a.IdempotencyKey)
	f.wantState(a.ConfirmationRef, ledger.ConfirmationAvailable, "")
}

func testStageAdvance(t *testing.T, f *fixture) {
	create := f.createWithStage("create", "pretrain")
	f.wantStage(create.RunID, "pretrain")

	adv := f.runStep(create.RunID, "adv-1", "pretrain", "long_context")
	stored := f.commit(adv)
	if !equal(stored, adv) {
		t.Fatalf("Commit stored %+v, want %+v", stored, adv)
	}
	f.wantAdmission("acct_42", "adv-1", adv)
	f.wantStage(create.RunID, "long_context")

	// The same request again: its stored allow, although the run moved on.
	again, replayed, err := f.s.Commit(f.ctx, adv)
	if err != nil || !replayed || !equal(again, adv) {
		t.Fatalf("replay = %+v, %v, %v; want the stored advance", again, replayed, err)
	}

	// An advance from a stage the run left: a conflict, nothing written.
	stale := f.runStep(create.RunID, "adv-stale", "pretrain", "long_context")
	_, _, err = f.s.Commit(f.ctx, stale)
	wantErr(t, "advance from a stage the run left", err, ledger.ErrStageConflict)
	f.wantNothingOnRun(stale)
	f.wantStage(create.RunID, "long_context")

	// Run still answers with the create.
	if run, err := f.s.Run(f.ctx, create.RunID); err != nil || !equal(run, create) {
		t.Fatalf("Run = %+v, %v; want the create", run, err)
	}
}

func testStageAdvanceUnknownRun(t *testing.T, f *fixture) {
	for _, from := range []string{"pretrain", ""} {
		a := f.runStep(ledger.NewRunID(), "unknown-"+from, from, "sft")
		_, _, err := f.s.Commit(f.ctx, a)
		wantErr(t, "advance or restart of an unknown run", err, ledger.ErrNotFound)
		f.wantNothingOnRun(a)
	}
	// A run created in no stage is in "", not in "pretrain".
	noStage := f.createWithStage("create", "")
	f.wantStage(noStage.RunID, "")
	a := f.runStep(noStage.RunID, "adv-nostage", "pretrain", "sft")
	_, _, err := f.s.Commit(f.ctx, a)
	wantErr(t, "advance of a run in no stage", err, ledger.ErrStageConflict)
	f.wantNothingOnRun(a)
}

func testEndedRunNeitherAdvancesNorRestarts(t *testing.T, f *fixture) {
	for _, end := range []string{"train.cancel", "train.cleanup"} {
		create := f.createWithStage("create-"+end, "pretrain")
		f.commit(f.lifecycle("acct_42", api.Action(end), "bk_01", create.RunID, end, base.Add(3*time.Second)))
		for _, from := range []string{"pretrain", ""} {
			a := f.runStep(create.RunID, "after-"+end+"-"+from, from, "sft")
			_, _, err := f.s.Commit(f.ctx, a)
			wantErr(t, "advance or restart after "+end, err, ledger.ErrRunEnded)
			f.wantNothingOnRun(a)
		}
		f.wantStage(create.RunID, "pretrain")
	}
}

func testRestartRecordsStep(t *testing.T, f *fixture) {
	create := f.createWithStage("create", "pretrain")
	a := f.runStep(create.RunID, "restart", "", "")
	f.commit(a)
	f.wantAdmission("acct_42", "restart", a)
	f.wantStage(create.RunID, "pretrain")

	// A checkpoint step on anything but a restart, a from-stage on a
	// restart, a negative step, an advance that does not move: invalid.
	for name, tweak := range map[string]func(*ledger.Admission){
		"negative step":     func(a *ledger.Admission) { a.CheckpointStep = -1 },
		"step on a cancel":  func(a *ledger.Admission) { a.State, a.CheckpointStep = api.StateCancelAdmitted, 5 },
		"from on a restart": func(a *ledger.Admission) { a.FromStage = "pretrain" },
		"advance in place": func(a *ledger.Admission) {
			a.State, a.CheckpointStep, a.FromStage, a.Stage = api.StateStageAdvanced, 0, "sft", "sft"
		},
		"advance without from": func(a *ledger.Admission) {
			a.State, a.CheckpointStep, a.Stage = api.StateStageAdvanced, 0, "sft"
		},
	} {
		bad := f.runStep(create.RunID, "bad-"+name, "", "")
		tweak(&bad)
		_, _, err := f.s.Commit(f.ctx, bad)
		wantErr(t, name, err, ledger.ErrInvalid)
		f.wantNothingOnRun(bad)
	}
}

func testConcurrentStageAdvances(t *testing.T, f *fixture) {
	ConcurrentStageAdvances(t, []ledger.Store{f.s}, "bk_01", 16)
}

// ConcurrentStageAdvances races n advances of one run on booking from
// pretrain to sft, each under its own key and confirmation, the i-th
// committed on stores[i % len(stores)] (replicas sharing one ledger):
// exactly one wins and is stored, the run is in sft, and every other one
// is refused with ErrStageConflict and wrote nothing.
func ConcurrentStageAdvances(t *testing.T, stores []ledger.Store, booking string, n int) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	c := f.create("acct_42", booking, booking+"-create", 1, 1<<20)
	c.Stage = "pretrain"
	create := f.commit(c)
	attempts := make([]ledger.Admission, n)
	errs := make([]error, n)
	for i := range n {
		attempts[i] = f.runStepOn(booking, create.RunID, fmt.Sprintf("%s-adv-%02d", booking, i), "pretrain", "sft")
	}
	race(n, func(i int) { _, _, errs[i] = stores[i%len(stores)].Commit(t.Context(), attempts[i]) })
	winner := soleWinner(t, "stage advance", errs, ledger.ErrStageConflict)
	f.wantStage(create.RunID, "sft")
	for i, a := range attempts {
		if i == winner {
			f.wantAdmission(a.Account, a.IdempotencyKey, a)
			continue
		}
		f.wantNothingOnRun(a)
	}
}
