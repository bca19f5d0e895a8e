package ledgertest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// A booking's history: usage and the capacity check must answer from the
// runs live at the instant asked, exactly as over every run the booking
// ever had, however many ended or expired before. Stores that keep an
// index of live runs are checked here against the run records' own
// liveness (ledger.Usage over a model of every run).

// historyRuns is how many runs BookingHistory admits on its booking.
const historyRuns = 48

// history is what BookingHistory wrote: the model of every run (as the
// store must hold it) and the instants worth asking about.
type history struct {
	booking, fresh string
	runs           []ledger.RunRecord // every run of booking, as stored
	freshRuns      []ledger.RunRecord // the fresh booking's runs: booking's live ones at end, again
	end            time.Time          // after every admission of the history
	instants       []time.Time
}

// BookingHistory writes a long history on a booking of 64 GPUs through s's
// own Commit — runs cancelled, cleaned up, expired, moved a stage, and a
// few still live — and returns a function that checks, on s or on a store
// holding the same records (a migrated copy of s's file), that usage at
// every instant of that history, the capacity check at its end and a
// booking holding only its live runs all answer as the run records say.
// The returned function commits (the capacity check), so call it once.
func BookingHistory(t *testing.T, s ledger.Store) func(t *testing.T, s ledger.Store) {
	t.Helper()
	f := &fixture{t: t, s: s, ctx: t.Context()}
	h := &history{booking: "bk_hist", fresh: "bk_hist_fresh"}
	at := func(i int) time.Time { return base.Add(time.Duration(i)*time.Minute + 1500*time.Microsecond) }
	for i := range historyRuns {
		account := "acct_42" // a booking belongs to one account
		a := f.create(account, h.booking, fmt.Sprintf("hist-%d", i), 1+i%3, 64)
		a.CreatedAt, a.LiveUntil = at(i), base.Add(10*time.Hour)
		if i%4 == 2 {
			a.LiveUntil = at(i).Add(90 * time.Second) // expires before the next but one
		}
		if i%8 == 7 {
			a.Stage = "pretrain"
		}
		f.commit(a)
		r := ledger.RunRecord{RunID: a.RunID, Account: account, BookingID: h.booking, ManifestDigest: a.ManifestDigest,
			GPUs: a.GPUs, BookedGPUs: 64, AdmittedAt: a.CreatedAt, LiveUntil: a.LiveUntil, Stage: a.Stage}
		h.instants = append(h.instants, a.CreatedAt.Add(10*time.Second))
		switch i % 4 {
		case 0, 1: // ended 30 s after admission by the account's cancel or cleanup
			action := []api.Action{api.TrainCancel, api.TrainCleanup}[i%4]
			end := a.CreatedAt.Add(30 * time.Second)
			f.commit(f.lifecycle(account, action, h.booking, a.RunID, fmt.Sprintf("hist-end-%d", i), end))
			r.EndedAt, r.EndedBy = end, action
			h.instants = append(h.instants, end, end.Add(-time.Microsecond))
		case 2:
			h.instants = append(h.instants, r.LiveUntil, r.LiveUntil.Add(-time.Microsecond))
		case 3:
			if i%8 == 7 { // live, moved on a stage
				adv := f.lifecycle(account, "train.stage.advance", h.booking, a.RunID, fmt.Sprintf("hist-adv-%d", i), a.CreatedAt.Add(time.Second))
				adv.RunID, adv.ManifestDigest = a.RunID, ""
				adv.State, adv.FromStage, adv.Stage = api.StateStageAdvanced, "pretrain", "sft"
				f.commit(adv)
				r.Stage = "sft"
			}
		}
		h.runs = append(h.runs, r)
	}
	h.end = at(historyRuns)
	h.instants = append(h.instants, base.Add(-time.Hour), h.end, base.Add(10*time.Hour).Add(-time.Microsecond), base.Add(10*time.Hour))
	// The same live runs on a booking that never had any other.
	for _, r := range ledger.Usage(h.booking, h.runs, time.Time{}, h.end).Runs {
		a := f.create(r.Account, h.fresh, "fresh-"+r.RunID, r.GPUs, 64)
		a.CreatedAt, a.LiveUntil, a.Stage = r.AdmittedAt, r.LiveUntil, r.Stage
		f.commit(a)
		fr := r
		fr.RunID, fr.BookingID = a.RunID, h.fresh
		h.freshRuns = append(h.freshRuns, fr)
	}
	return h.verify
}

// sameRuns reports whether got and want list the same records in order.
func sameRuns(got, want []ledger.RunRecord) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !got[i].Equal(want[i]) {
			return false
		}
	}
	return true
}

func (h *history) verify(t *testing.T, s ledger.Store) {
	t.Helper()
	f := &fixture{t: t, s: s, ctx: t.Context()}
	for _, now := range h.instants {
		want := ledger.Usage(h.booking, h.runs, time.Time{}, now)
		got, err := s.BookingUsage(f.ctx, h.booking, now)
		if err != nil || got.BookingID != h.booking || got.HeldGPUs != want.HeldGPUs || !got.Released.IsZero() ||
			!sameRuns(got.Runs, want.Runs) {
			t.Fatalf("BookingUsage(%s, %s) = %+v, %v\nwant %+v", h.booking, now, got, err, want)
		}
	}
	// A booking that only ever had the live runs answers the same.
	u, err := s.BookingUsage(f.ctx, h.booking, h.end)
	if err != nil {
		t.Fatal(err)
	}
	fu, err := s.BookingUsage(f.ctx, h.fresh, h.end)
	if err != nil || fu.HeldGPUs != u.HeldGPUs || len(fu.Runs) != len(u.Runs) || !sameRuns(fu.Runs, h.freshRuns) {
		t.Fatalf("fresh booking: %+v, %v; want %d GPUs held by %+v", fu, err, u.HeldGPUs, h.freshRuns)
	}
	for _, r := range h.runs {
		got := f.wantRun(r.RunID, r.Live(h.end), h.end)
		if !sameRuns([]ledger.RunRecord{got.Held()}, []ledger.RunRecord{r}) {
			t.Fatalf("RunRecord(%s) = %+v, want %+v", r.RunID, got, r)
		}
	}

	// Capacity at the end counts the live runs only: one GPU beyond the
	// rest is refused naming acct_42's live runs, exactly the rest fits.
	left := 64 - u.HeldGPUs
	var mine []string
	for _, r := range u.Runs {
		if r.Account == "acct_42" {
			mine = append(mine, r.RunID)
		}
	}
	over := f.create("acct_42", h.booking, "hist-over", left+1, 64)
	over.CreatedAt, over.LiveUntil = h.end, h.end.Add(time.Hour)
	_, _, err = s.Commit(f.ctx, over)
	var ce *ledger.CapacityError
	if !errors.As(err, &ce) || ce.HeldGPUs != u.HeldGPUs || ce.WantGPUs != left+1 || len(ce.Runs) != len(mine) {
		t.Fatalf("create of %d GPUs over %d held: %v, want a CapacityError naming %v", left+1, u.HeldGPUs, err, mine)
	}
	for i, r := range ce.Runs {
		if r.RunID != mine[i] {
			t.Fatalf("CapacityError runs %+v, want %v", ce.Runs, mine)
		}
	}
	f.wantNothingFrom(over)
	fits := f.create("acct_42", h.booking, "hist-fits", left, 64)
	fits.CreatedAt, fits.LiveUntil = h.end, h.end.Add(time.Hour)
	f.commit(fits)
	f.wantHeld(h.booking, h.end, 64)
}

// testBookingHistory: see BookingHistory.
func testBookingHistory(t *testing.T, f *fixture) {
	BookingHistory(t, f.s)(t, f.s)
}

// testEndedRunsStayEnded: a run, once ended, never holds GPUs again after
// its end — not after a second end (cleanup after cancel), a release, or
// a stage step refused on it — while a decision from before its end still
// counts it (RunRecord.Live), and expiry frees a booking completely.
func testEndedRunsStayEnded(t *testing.T, f *fixture) {
	a := f.create("acct_42", "bk_ended", "a", 32, 64)
	f.commit(a)
	b := f.create("acct_42", "bk_ended", "b", 16, 64)
	b.CreatedAt = a.CreatedAt.Add(time.Second)
	f.commit(b)
	cancelAt := a.CreatedAt.Add(time.Minute)
	f.commit(f.lifecycle("acct_42", "train.cancel", "bk_ended", a.RunID, "cancel-a", cancelAt))
	f.commit(f.lifecycle("acct_42", "train.cleanup", "bk_ended", a.RunID, "cleanup-a", cancelAt.Add(time.Minute)))
	f.wantHeld("bk_ended", cancelAt, 16)
	f.wantHeld("bk_ended", cancelAt.Add(-time.Microsecond), 48) // decided before the cancel
	restart := f.lifecycle("acct_42", "train.restart", "bk_ended", a.RunID, "restart-a", cancelAt.Add(2*time.Minute))
	restart.RunID, restart.ManifestDigest = a.RunID, ""
	restart.State, restart.CheckpointStep = api.StateRestartAdmitted, 1
	_, _, err := f.s.Commit(f.ctx, restart)
	wantErr(t, "restart of the cancelled run", err, ledger.ErrRunEnded)
	f.wantHeld("bk_ended", cancelAt.Add(3*time.Minute), 16)
	// A create that decided before the cancel still finds a holding 32.
	early := f.create("acct_42", "bk_ended", "early", 32, 64)
	early.CreatedAt = cancelAt.Add(-time.Microsecond)
	_, _, err = f.s.Commit(f.ctx, early)
	wantErr(t, "create decided before the cancel", err, ledger.ErrCapacityExceeded)
	f.wantNothingFrom(early)
	late := f.create("acct_42", "bk_ended", "late", 48, 64)
	late.CreatedAt = cancelAt.Add(3 * time.Minute)
	f.commit(late)
	f.wantHeld("bk_ended", late.CreatedAt, 64)
	// After every declared end nothing is held and the whole booking fits.
	after := late.LiveUntil
	f.wantHeld("bk_ended", after, 0)
	full := f.create("acct_42", "bk_ended", "full", 64, 64)
	full.CreatedAt, full.LiveUntil = after, after.Add(time.Hour)
	f.commit(full)
	f.wantHeld("bk_ended", after, 64)
	// A release ends it; later reads never count it again.
	relAt := after.Add(time.Minute)
	f.commit(f.lifecycle("acct_42", "booking.release", "bk_ended", "", "release", relAt))
	for _, at := range []time.Time{relAt, relAt.Add(time.Second), full.LiveUntil.Add(time.Hour)} {
		u, err := f.s.BookingUsage(f.ctx, "bk_ended", at)
		if err != nil || u.HeldGPUs != 0 || len(u.Runs) != 0 || !u.Released.Equal(relAt) {
			t.Fatalf("BookingUsage(%s) after the release = %+v, %v", at, u, err)
		}
	}
	f.wantHeld("bk_ended", relAt.Add(-time.Microsecond), 64)
}

// testFirstEndStays: two ends of one run that commit out of the order they
// were decided in (concurrent cancel and cleanup, or replicas' clocks
// apart) leave the run ended as the first commit ended it: an end decided
// before the recorded one does not move it earlier.
func testFirstEndStays(t *testing.T, f *fixture) {
	a := f.create("acct_42", "bk_first_end", "a", 8, 64)
	f.commit(a)
	cancelAt := a.CreatedAt.Add(2 * time.Minute)
	f.commit(f.lifecycle("acct_42", "train.cancel", "bk_first_end", a.RunID, "cancel-a", cancelAt))
	f.commit(f.lifecycle("acct_42", "train.cleanup", "bk_first_end", a.RunID, "cleanup-a", cancelAt.Add(-time.Minute)))
	r, err := f.s.RunRecord(f.ctx, a.RunID)
	if err != nil || !r.EndedAt.Equal(cancelAt) || r.EndedBy != "train.cancel" {
		t.Fatalf("RunRecord after a cleanup decided before the committed cancel = %+v, %v; want ended at %s by train.cancel",
			r, err, cancelAt)
	}
	f.wantHeld("bk_first_end", cancelAt.Add(-time.Second), 8)
	f.wantHeld("bk_first_end", cancelAt, 0)
}
