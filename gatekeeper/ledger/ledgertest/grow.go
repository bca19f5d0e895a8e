package ledgertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// Stages that grow their run: a train.stage.advance into a stage larger
// than its run (Admission.StageGPUs) grows the run's GPUs in the commit
// when the booking has the difference free (ledger.CheckGrow), decided
// under the same serialization as train.create's capacity; refused, it
// writes nothing. A run never shrinks.

// grow returns a stage advance of run (acct_42 on booking) from stage
// from to stage to at at, into a stage of stageGPUs, with a deposited
// confirmation bound to it.
func (f *fixture) grow(booking, run, key, from, to string, stageGPUs int, at time.Time) ledger.Admission {
	f.t.Helper()
	a := f.lifecycle("acct_42", api.TrainStageAdvance, booking, run, key, at)
	a.RunID, a.ManifestDigest = run, ""
	a.State, a.FromStage, a.Stage, a.StageGPUs = api.StateStageAdvanced, from, to, stageGPUs
	return a
}

// wantGPUs asserts the run's record holds gpus GPUs in stage.
func (f *fixture) wantGPUs(run, stage string, gpus int) ledger.RunRecord {
	f.t.Helper()
	r, err := f.s.RunRecord(f.ctx, run)
	if err != nil || r.GPUs != gpus || r.Stage != stage {
		f.t.Fatalf("RunRecord(%s) = %+v, %v; want %d GPUs in stage %q", run, r, err, gpus, stage)
	}
	return r
}

// wantLastEventGPUs asserts the run's latest event is the decision's and
// set gpus GPUs (0: it set none).
func (f *fixture) wantLastEventGPUs(run, decision string, gpus int) {
	f.t.Helper()
	events, err := f.s.RunEvents(f.ctx, run)
	if err != nil || len(events) == 0 {
		f.t.Fatalf("RunEvents(%s) = %+v, %v", run, events, err)
	}
	if e := events[len(events)-1]; e.DecisionID != decision || e.GPUs != gpus {
		f.t.Fatalf("RunEvents(%s) last = %+v; want decision %s setting %d GPUs", run, e, decision, gpus)
	}
}

// testStageGrow: on a booking of 64 GPUs, run a (16) and a run of 48
// hold it whole until the 48 are cancelled; run b (16) is created. An
// advance of a into a stage of 32 grows it to 32 — on its record, its
// event and the booking's usage (48 held) — taking GPUs the cancelled run
// once held (the checkers count each run at what it held at each instant,
// so a held 16, not 32, beside the 48). Its replay returns the stored
// advance. A later advance into a smaller stage keeps the 32. Creates find
// the grown run counted: 17 more is refused, 16 is not; cancelling the
// grown run frees its 32.
func testStageGrow(t *testing.T, f *fixture) {
	const bk = "bk_grow"
	a := f.create("acct_42", bk, "a", 16, 64)
	a.Stage = "pretrain"
	f.commit(a)
	full := f.create("acct_42", bk, "full", 48, 64)
	full.CreatedAt = a.CreatedAt.Add(time.Second)
	f.commit(full)
	f.wantHeld(bk, full.CreatedAt, 64)
	f.commit(f.lifecycle("acct_42", api.TrainCancel, bk, full.RunID, "cancel-full", full.CreatedAt.Add(time.Second)))
	b := f.create("acct_42", bk, "b", 16, 64)
	b.CreatedAt = full.CreatedAt.Add(2 * time.Second)
	f.commit(b)
	f.wantHeld(bk, b.CreatedAt, 32)

	at := b.CreatedAt.Add(time.Minute)
	adv := f.grow(bk, a.RunID, "grow-a", "pretrain", "long_context", 32, at)
	stored := f.commit(adv)
	if !equal(stored, adv) || stored.StageGPUs != 0 || stored.GPUs != 0 {
		t.Fatalf("Commit stored %+v, want %+v (StageGPUs an input, never stored)", stored, adv)
	}
	f.wantAdmission("acct_42", "grow-a", adv)
	f.wantGPUs(a.RunID, "long_context", 32)
	f.wantLastEventGPUs(a.RunID, adv.DecisionID, 32)
	f.wantHeld(bk, at, 48)
	u, err := f.s.BookingUsage(f.ctx, bk, at)
	if err != nil || len(u.Runs) != 2 || u.Runs[0].RunID != a.RunID || u.Runs[0].GPUs != 32 {
		t.Fatalf("BookingUsage after the grow = %+v, %v; want run a holding 32", u, err)
	}
	again, replayed, err := f.s.Commit(f.ctx, adv)
	if err != nil || !replayed || !equal(again, adv) {
		t.Fatalf("replay = %+v, %v, %v; want the stored advance", again, replayed, err)
	}
	f.wantGPUs(a.RunID, "long_context", 32)

	// A smaller stage: the run keeps what it holds, the event sets nothing.
	smaller := f.grow(bk, a.RunID, "smaller-a", "long_context", "sft", 8, at.Add(time.Minute))
	f.commit(smaller)
	f.wantGPUs(a.RunID, "sft", 32)
	f.wantLastEventGPUs(a.RunID, smaller.DecisionID, 0)
	f.wantHeld(bk, at.Add(time.Minute), 48)

	// Creates count the grown run: 16 are left, not 17.
	over := f.create("acct_42", bk, "over", 17, 64)
	over.CreatedAt = at.Add(2 * time.Minute)
	_, _, err = f.s.Commit(f.ctx, over)
	var ce *ledger.CapacityError
	if !errors.As(err, &ce) || ce.HeldGPUs != 48 || ce.WantGPUs != 17 || ce.RunID != "" {
		t.Fatalf("create of 17 beside the grown run: %v, want a CapacityError over 48 held", err)
	}
	f.wantNothingFrom(over)
	fits := f.create("acct_42", bk, "fits", 16, 64)
	fits.CreatedAt = over.CreatedAt
	f.commit(fits)
	f.wantHeld(bk, fits.CreatedAt, 64)

	// Cancelling the grown run frees what it grew to.
	f.commit(f.lifecycle("acct_42", api.TrainCancel, bk, a.RunID, "cancel-a", fits.CreatedAt.Add(time.Second)))
	f.wantHeld(bk, fits.CreatedAt.Add(time.Second), 32)
}

// testStageGrowRefused: on a booking of 64 GPUs held whole by runs a (32)
// and b (32), an advance of a into a stage of 48 is refused with a
// CapacityError naming the run, its GPUs, the stage's and the difference,
// and writes nothing: no admission, the confirmation available, the run in
// its stage at its GPUs without a new event, the usage as it was. Once b
// is cancelled, the very same advance (same confirmation, same key) grows
// the run.
func testStageGrowRefused(t *testing.T, f *fixture) {
	const bk = "bk_grow_refused"
	a := f.create("acct_42", bk, "a", 32, 64)
	a.Stage = "pretrain"
	f.commit(a)
	b := f.create("acct_42", bk, "b", 32, 64)
	b.CreatedAt = a.CreatedAt.Add(time.Second)
	f.commit(b)
	at := b.CreatedAt.Add(time.Minute)
	adv := f.grow(bk, a.RunID, "grow-a", "pretrain", "long_context", 48, at)
	before, err := f.s.RunEvents(f.ctx, a.RunID)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = f.s.Commit(f.ctx, adv)
	var ce *ledger.CapacityError
	if !errors.As(err, &ce) || !errors.Is(err, ledger.ErrCapacityExceeded) {
		t.Fatalf("grow past the booking: %v, want a CapacityError", err)
	}
	if ce.RunID != a.RunID || ce.RunGPUs != 32 || ce.StageGPUs != 48 || ce.WantGPUs != 16 || ce.HeldGPUs != 64 ||
		ce.BookedGPUs != 64 || len(ce.Runs) != 2 {
		t.Fatalf("CapacityError = %+v; want run %s growing 32 → 48 (16 more) over 64 held of 64, naming both runs", ce, a.RunID)
	}
	f.wantNothingOnRun(adv)
	f.wantGPUs(a.RunID, "pretrain", 32)
	if after, err := f.s.RunEvents(f.ctx, a.RunID); err != nil || len(after) != len(before) {
		t.Fatalf("RunEvents after the refused grow = %d, %v; want the %d before", len(after), err, len(before))
	}
	f.wantHeld(bk, at, 64)

	// Also a stage beyond the whole booking (a run of the booking's size
	// could not hold it either).
	huge := f.grow(bk, a.RunID, "grow-huge", "pretrain", "long_context", 65, at)
	_, _, err = f.s.Commit(f.ctx, huge)
	wantErr(t, "grow beyond the booking", err, ledger.ErrCapacityExceeded)
	f.wantNothingOnRun(huge)

	f.commit(f.lifecycle("acct_42", api.TrainCancel, bk, b.RunID, "cancel-b", at.Add(time.Second)))
	adv.CreatedAt = at.Add(2 * time.Second)
	f.commit(adv)
	f.wantGPUs(a.RunID, "long_context", 48)
	f.wantLastEventGPUs(a.RunID, adv.DecisionID, 48)
	f.wantHeld(bk, adv.CreatedAt, 48)
}

// testRaceGrowCreate: see RaceGrowCreate.
func testRaceGrowCreate(t *testing.T, f *fixture) {
	for _, n := range []int{2, 10, 30} {
		RaceGrowCreate(t, []ledger.Store{f.s}, fmt.Sprintf("bk_gc_%d", n), n)
	}
}

// RaceGrowCreate: on booking (64 GPUs) run a holds 32; an advance of a into
// a stage of 64 races n-1 creates of 32, spread over stores (replicas of
// one ledger): each needs the booking's last 32 GPUs. Exactly one commits;
// every other one is refused ErrCapacityExceeded and writes nothing; the
// booking holds exactly 64 afterwards, and a store that checks itself finds
// no instant at which it held more (ledger.CheckHeld).
func RaceGrowCreate(t *testing.T, stores []ledger.Store, booking string, n int) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	a := f.create("acct_42", booking, booking+"-a", 32, 64)
	a.Stage = "pretrain"
	f.commit(a)
	at := a.CreatedAt.Add(time.Second)
	adv := f.grow(booking, a.RunID, booking+"-grow", "pretrain", "long_context", 64, at)
	creates := make([]ledger.Admission, n-1)
	for i := range creates {
		creates[i] = f.create("acct_42", booking, fmt.Sprintf("%s-create-%d", booking, i), 32, 64)
		creates[i].CreatedAt = at
	}
	errs := make([]error, n)
	race(n, func(i int) {
		s := stores[i%len(stores)]
		if i == 0 {
			_, _, errs[i] = s.Commit(t.Context(), adv)
			return
		}
		_, _, errs[i] = s.Commit(t.Context(), creates[i-1])
	})
	winner := soleWinner(t, "grow or create", errs, ledger.ErrCapacityExceeded)
	if winner == 0 {
		f.wantGPUs(a.RunID, "long_context", 64)
		f.wantLastEventGPUs(a.RunID, adv.DecisionID, 64)
	} else {
		f.wantGPUs(a.RunID, "pretrain", 32)
		f.wantNothingOnRun(adv)
		var ce *ledger.CapacityError
		if !errors.As(errs[0], &ce) || ce.RunID != a.RunID || ce.WantGPUs != 32 || ce.HeldGPUs != 64 {
			t.Fatalf("the losing grow: %v, want a CapacityError for run %s's 32 more over 64 held", errs[0], a.RunID)
		}
	}
	for i, c := range creates {
		if i+1 == winner {
			f.wantRun(c.RunID, true, at)
			continue
		}
		f.wantNothingFrom(c)
		f.wantState(c.ConfirmationRef, ledger.ConfirmationAvailable, "")
	}
	f.wantHeld(booking, at, 64)
	if c, ok := stores[0].(ledger.Checker); ok {
		if rep, err := c.Check(t.Context()); err != nil {
			t.Fatalf("Check after the race: %v (%+v)", err, rep)
		}
	}
}
