package ledgertest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// The eval authority's direct reports (issue 23, item 5): a stage's report
// deadline, recorded at stage entry, past which a run without a passing
// report counts as halted (RunRecord.Overdue); a passing report recorded
// before it (RecordReport); a failing one halting the run without any
// request of its holder (HaltRun, as the direct post calls it).

// reportWindow is the report deadline of the suite's stages.
const reportWindow = 10 * time.Minute

// createDue commits a train.create of acct_42 on booking in stage
// pretrain whose report is due reportWindow after its admission.
func (f *fixture) createDue(booking, key string) ledger.Admission {
	f.t.Helper()
	a := f.create("acct_42", booking, key, 8, 64)
	a.EntitlementJTI, a.Stage = "ent-"+booking, "pretrain"
	a.ReportDue = a.CreatedAt.Add(reportWindow)
	f.commit(a)
	return a
}

// passing is a passing report of run (acct_42 on booking) for stage at at.
func passing(run, booking, stage string, at time.Time) ledger.Report {
	return ledger.Report{RunID: run, Account: "acct_42", BookingID: booking, RunReport: ledger.RunReport{
		At: at, DecisionID: "dec_rep_" + run[4:12] + "_" + stage, Stage: stage, ReportDigest: digest("pass-" + run + stage),
		By: "evals:eval-key-1"}}
}

// wantNoNewEvents asserts fn wrote no event on run.
func (f *fixture) wantNoNewEvents(what, run string, fn func()) {
	f.t.Helper()
	before, err := f.s.RunEvents(f.ctx, run)
	if err != nil {
		f.t.Fatal(err)
	}
	fn()
	if after, _ := f.s.RunEvents(f.ctx, run); len(after) != len(before) {
		f.t.Fatalf("%s wrote an event: %+v", what, after[len(before):])
	}
}

// testReportDeadline: a stage's report deadline, recorded by its
// train.create, makes the run count as halted from the deadline on
// (ReportOverdueError, wrapping ErrReportOverdue and ErrRunHalted) with no
// event; restarts, advances and halts at or past it are refused, writing
// nothing; before it they commit; a teardown ends the overdue run.
func testReportDeadline(t *testing.T, f *fixture) {
	a := f.createDue("bk_due", "a")
	due := a.CreatedAt.Add(reportWindow)
	r := f.wantRunState(a.RunID, due.Add(-time.Microsecond), api.RunLive)
	if !r.ReportDue.Equal(due) || !r.Report.At.IsZero() || r.Overdue(due.Add(-time.Microsecond)) || !r.Overdue(due) {
		t.Fatalf("RunRecord = %+v; want the report due at %s, overdue from then", r, due)
	}
	f.wantRunState(a.RunID, due, api.RunHalted)
	err := r.MayWork(due)
	if oe, ok := errors.AsType[*ledger.ReportOverdueError](err); !ok || oe.Stage != "pretrain" || !oe.Due.Equal(due) ||
		!errors.Is(err, ledger.ErrReportOverdue) || !errors.Is(err, ledger.ErrRunHalted) {
		t.Fatalf("MayWork at the deadline = %v; want a ReportOverdueError naming stage pretrain", err)
	}
	f.wantEvents(a.RunID, ledger.AdmissionEvent(a, a.RunID, true))

	early := f.step("acct_42", "bk_due", a.RunID, "restart-early", "ent-bk_due", api.TrainRestart, due.Add(-time.Second))
	f.commit(early)
	for _, action := range []api.Action{api.TrainRestart, api.TrainStageAdvance} {
		late := f.step("acct_42", "bk_due", a.RunID, "late-"+string(action), "ent-bk_due", action, due)
		err := f.wantRefused(string(action)+" at the deadline", late, ledger.ErrReportOverdue)
		if !errors.Is(err, ledger.ErrRunHalted) {
			t.Fatalf("%s at the deadline: %v, want it to count as halted too", action, err)
		}
	}
	f.wantNoNewEvents("a halt of the overdue run", a.RunID, func() {
		h := halt(a.RunID, "bk_due", due.Add(time.Second))
		if _, halted, err := f.s.HaltRun(f.ctx, h); halted || !errors.Is(err, ledger.ErrReportOverdue) {
			t.Fatalf("HaltRun past the deadline = %v, %v; want ErrReportOverdue", halted, err)
		}
	})
	r = f.wantRunState(a.RunID, due, api.RunHalted)
	if r.Restarts != 1 || !r.Halt.At.IsZero() {
		t.Fatalf("run after the refusals = %+v; want the early restart only and no recorded halt", r)
	}
	f.wantHeld("bk_due", due, 8)
	cancel := f.commit(f.lifecycle("acct_42", api.TrainCancel, "bk_due", a.RunID, "cancel", due.Add(time.Minute)))
	f.wantRunState(a.RunID, due.Add(time.Minute), api.RunCancelled)
	f.wantEvents(a.RunID, ledger.AdmissionEvent(a, a.RunID, true), ledger.AdmissionEvent(early, a.RunID, true),
		ledger.AdmissionEvent(cancel, a.RunID, true))

	// No deadline: never overdue.
	free := f.createUnder("acct_42", "bk_due", "free", "ent-bk_due")
	f.wantRunState(free.RunID, free.LiveUntil.Add(-time.Second), api.RunLive)
}

// testRecordReport: a passing report recorded before the deadline keeps
// the run live past it, with its event; the same stage's report again
// keeps the first; an advance records the next stage's deadline and
// forgets the report, so the next stage needs its own; a report for a
// stage the run left, or of a run halted, overdue, ended, revoked,
// unknown, another account's or malformed is refused, writing nothing.
func testRecordReport(t *testing.T, f *fixture) {
	a := f.createDue("bk_rep", "a")
	due := a.CreatedAt.Add(reportWindow)
	p := passing(a.RunID, "bk_rep", "pretrain", due.Add(-time.Minute))
	r, recorded, err := f.s.RecordReport(f.ctx, p)
	if err != nil || !recorded || !r.Report.At.Equal(p.At) || r.Report.DecisionID != p.DecisionID ||
		r.Report.Stage != "pretrain" || r.Report.ReportDigest != p.ReportDigest || r.Report.By != p.By {
		t.Fatalf("RecordReport = %+v, %v, %v; want the report recorded", r, recorded, err)
	}
	if stored := f.wantRunState(a.RunID, due.Add(time.Hour), api.RunLive); !stored.Equal(r) {
		t.Fatalf("RunRecord after the report = %+v, want %+v", stored, r)
	}
	again := p
	again.At, again.DecisionID = p.At.Add(time.Second), "dec_rep_again"
	if r, recorded, err := f.s.RecordReport(f.ctx, again); err != nil || recorded || r.Report.DecisionID != p.DecisionID {
		t.Fatalf("second RecordReport = %+v, %v, %v; want the first kept", r, recorded, err)
	}
	restart := f.step("acct_42", "bk_rep", a.RunID, "restart", "ent-bk_rep", api.TrainRestart, due.Add(time.Minute))
	f.commit(restart)

	adv := f.step("acct_42", "bk_rep", a.RunID, "adv", "ent-bk_rep", api.TrainStageAdvance, due.Add(2*time.Minute))
	adv.ReportDue = adv.CreatedAt.Add(reportWindow)
	f.commit(adv)
	r = f.wantRunState(a.RunID, adv.ReportDue.Add(-time.Microsecond), api.RunLive)
	if r.Stage != "sft" || !r.ReportDue.Equal(adv.ReportDue) || !r.Report.At.IsZero() {
		t.Fatalf("run after the advance = %+v; want stage sft, its own deadline, no report", r)
	}
	f.wantRunState(a.RunID, adv.ReportDue, api.RunHalted)
	f.wantEvents(a.RunID, ledger.AdmissionEvent(a, a.RunID, true), ledger.ReportEvent(p),
		ledger.AdmissionEvent(restart, a.RunID, true), ledger.AdmissionEvent(adv, a.RunID, true))

	halted := f.createDue("bk_rep", "halted")
	if _, ok, err := f.s.HaltRun(f.ctx, halt(halted.RunID, "bk_rep", halted.CreatedAt.Add(time.Second))); err != nil || !ok {
		t.Fatalf("HaltRun = %v, %v", ok, err)
	}
	overdue := f.createDue("bk_rep", "overdue")
	ended := f.createDue("bk_rep", "ended")
	f.commit(f.lifecycle("acct_42", api.TrainCleanup, "bk_rep", ended.RunID, "cleanup-ended", ended.CreatedAt.Add(time.Second)))
	revoked := f.create("acct_42", "bk_rep", "revoked", 8, 64)
	revoked.EntitlementJTI, revoked.Stage = "ent-rep-revoked", "pretrain"
	f.commit(revoked)
	f.revoke(ledger.RevokeEntitlement, "ent-rep-revoked", revoked.CreatedAt.Add(time.Second))
	live := f.createDue("bk_rep", "live")
	at := live.CreatedAt.Add(time.Minute)
	otherAccount := passing(live.RunID, "bk_rep", "pretrain", at)
	otherAccount.Account = "acct_43"
	for name, tc := range map[string]struct {
		p    ledger.Report
		want error
	}{
		"stage the run left": {passing(a.RunID, "bk_rep", "pretrain", adv.CreatedAt.Add(time.Second)), ledger.ErrStageConflict},
		"halted run":         {passing(halted.RunID, "bk_rep", "pretrain", at), ledger.ErrRunHalted},
		"overdue run":        {passing(overdue.RunID, "bk_rep", "pretrain", overdue.CreatedAt.Add(reportWindow)), ledger.ErrReportOverdue},
		"ended run":          {passing(ended.RunID, "bk_rep", "pretrain", at), ledger.ErrRunEnded},
		"revoked run":        {passing(revoked.RunID, "bk_rep", "pretrain", at), ledger.ErrRevoked},
		"unknown run":        {passing(ledger.NewRunID(), "bk_rep", "pretrain", at), ledger.ErrNotFound},
		"another account":    {otherAccount, ledger.ErrConfirmationMismatch},
		"another booking":    {passing(live.RunID, "bk_other", "pretrain", at), ledger.ErrConfirmationMismatch},
		"not a digest": {func() ledger.Report {
			x := passing(live.RunID, "bk_rep", "pretrain", at)
			x.ReportDigest = "md5:1"
			return x
		}(), ledger.ErrInvalid},
		"zero time": {passing(live.RunID, "bk_rep", "pretrain", time.Time{}), ledger.ErrInvalid},
		"no stage":  {passing(live.RunID, "bk_rep", "", at), ledger.ErrInvalid},
	} {
		f.wantNoNewEvents(name, tc.p.RunID, func() {
			_, recorded, err := f.s.RecordReport(f.ctx, tc.p)
			if recorded || !errors.Is(err, tc.want) {
				t.Fatalf("%s: RecordReport = %v, %v; want %v", name, recorded, err, tc.want)
			}
		})
	}
	f.wantRunState(live.RunID, at, api.RunLive)
	if r, _ := f.s.RunRecord(f.ctx, live.RunID); !r.Report.At.IsZero() {
		t.Fatalf("live run got a report: %+v", r)
	}
}

// testDirectHalt: the eval authority's failing report halts a live run
// as the direct post calls HaltRun (the run's own account and booking, the
// authority's key as the actor), also after a passing report for the
// stage; the halt is one event and consumes nothing; the same halt again
// changes nothing; restart and advance are refused with ErrRunHalted
// naming the failed evals; a cancel is admitted.
func testDirectHalt(t *testing.T, f *fixture) {
	a := f.createDue("bk_direct", "a")
	spare := f.deposit("acct_42", api.TrainRestart)
	p := passing(a.RunID, "bk_direct", "pretrain", a.CreatedAt.Add(time.Minute))
	if _, ok, err := f.s.RecordReport(f.ctx, p); err != nil || !ok {
		t.Fatalf("RecordReport = %v, %v", ok, err)
	}
	rec, err := f.s.RunRecord(f.ctx, a.RunID)
	if err != nil {
		t.Fatal(err)
	}
	h := ledger.Halt{RunID: rec.RunID, Account: rec.Account, BookingID: rec.BookingID, RunHalt: ledger.RunHalt{
		At: p.At.Add(time.Minute), DecisionID: "dec_direct_halt", Stage: rec.Stage, ReportDigest: digest("failing-report"),
		FailedEvals: []string{"mmlu_5shot"}, By: "evals:eval-key-1"}}
	for i := range 2 {
		r, halted, err := f.s.HaltRun(f.ctx, h)
		if err != nil || halted != (i == 0) || r.Halt.DecisionID != h.DecisionID || r.State(h.At) != api.RunHalted {
			t.Fatalf("HaltRun #%d = %+v, %v, %v; want the run halted once", i+1, r, halted, err)
		}
	}
	f.wantConfirmation(spare.Ref, spare)
	for _, action := range []api.Action{api.TrainRestart, api.TrainStageAdvance} {
		s := f.step("acct_42", "bk_direct", a.RunID, "step-"+string(action), "ent-bk_direct", action, h.At.Add(time.Second))
		err := f.wantRefused(string(action)+" of a directly halted run", s, ledger.ErrRunHalted)
		if he, ok := errors.AsType[*ledger.RunHaltedError](err); !ok || !slices.Equal(he.Halt.FailedEvals, h.FailedEvals) ||
			errors.Is(err, ledger.ErrReportOverdue) {
			t.Fatalf("%s: %v, want a RunHaltedError naming mmlu_5shot", action, err)
		}
	}
	cancel := f.commit(f.lifecycle("acct_42", api.TrainCancel, "bk_direct", a.RunID, "cancel", h.At.Add(2*time.Second)))
	f.wantRunState(a.RunID, h.At.Add(2*time.Second), api.RunCancelled)
	f.wantEvents(a.RunID, ledger.AdmissionEvent(a, a.RunID, true), ledger.ReportEvent(p), ledger.HaltEvent(h),
		ledger.AdmissionEvent(cancel, a.RunID, true))
}

// RaceReportRestart races n restarts of a run, decided at its stage's
// report deadline, against a passing report decided before it: each
// restart commits after the report's event or is refused with
// ErrReportOverdue writing nothing; the report is recorded.
func RaceReportRestart(t *testing.T, stores []ledger.Store, booking string, n int) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	run := f.createDue(booking, booking+"-create")
	due := run.CreatedAt.Add(reportWindow)
	attempts := make([]ledger.Admission, n)
	for i := range attempts {
		attempts[i] = f.step("acct_42", booking, run.RunID, fmt.Sprintf("%s-restart-%d", booking, i), "ent-"+booking,
			api.TrainRestart, due)
	}
	p := passing(run.RunID, booking, "pretrain", due.Add(-time.Second))
	errs := make([]error, n)
	var (
		perr     error
		recorded bool
	)
	race(n+1, func(i int) {
		if i == n {
			_, recorded, perr = stores[i%len(stores)].RecordReport(t.Context(), p)
			return
		}
		_, _, errs[i] = stores[i%len(stores)].Commit(t.Context(), attempts[i])
	})
	if perr != nil || !recorded {
		t.Fatalf("RecordReport = %v, %v; want the report recorded", recorded, perr)
	}
	events, err := f.s.RunEvents(f.ctx, run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, e := range events {
		pos[e.DecisionID] = i
	}
	committed := 0
	for i, a := range attempts {
		switch {
		case errs[i] == nil:
			committed++
			if pos[a.DecisionID] < pos[p.DecisionID] {
				t.Fatalf("restart %d committed before the report, past the deadline (events %+v)", i, events)
			}
		case errors.Is(errs[i], ledger.ErrReportOverdue):
			f.wantNothingOnRun(a)
		default:
			t.Fatalf("restart %d: %v, want nil or ErrReportOverdue", i, errs[i])
		}
	}
	r := f.wantRunState(run.RunID, due, api.RunLive)
	if r.Restarts != committed || len(events) != committed+2 {
		t.Fatalf("%d restarts committed; run %+v with %d events", committed, r, len(events))
	}
}

// RaceHaltReport races a failing direct report's halt against a passing
// report of the same stage: either order is possible, the run ends up
// halted; the passing report is recorded only if it came first.
func RaceHaltReport(t *testing.T, stores []ledger.Store, booking string) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	run := f.createDue(booking, booking+"-create")
	at := run.CreatedAt.Add(time.Minute)
	p := passing(run.RunID, booking, "pretrain", at)
	var (
		herr, perr       error
		halted, recorded bool
	)
	race(2, func(i int) {
		if i == 0 {
			_, halted, herr = stores[0].HaltRun(t.Context(), halt(run.RunID, booking, at))
			return
		}
		_, recorded, perr = stores[1%len(stores)].RecordReport(t.Context(), p)
	})
	if herr != nil || !halted {
		t.Fatalf("HaltRun = %v, %v; want the run halted", halted, herr)
	}
	events, err := f.s.RunEvents(f.ctx, run.RunID)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case perr == nil && recorded:
		if len(events) != 3 || events[1].DecisionID != p.DecisionID || events[2].To != api.RunHalted {
			t.Fatalf("report recorded: events %+v, want create, report, halt", events)
		}
	case errors.Is(perr, ledger.ErrRunHalted) && !recorded:
		if len(events) != 2 || events[1].To != api.RunHalted {
			t.Fatalf("report refused: events %+v, want create, halt", events)
		}
	default:
		t.Fatalf("RecordReport = %v, %v; want it recorded, or refused with ErrRunHalted", recorded, perr)
	}
	f.wantRunState(run.RunID, at, api.RunHalted)
}

func testRaceReportRestart(t *testing.T, f *fixture) {
	for _, n := range []int{2, 10, 30} {
		RaceReportRestart(t, []ledger.Store{f.s}, fmt.Sprintf("bk_rpr_%d", n), n)
	}
}

func testRaceHaltReport(t *testing.T, f *fixture) {
	for i := range 5 {
		RaceHaltReport(t, []ledger.Store{f.s}, fmt.Sprintf("bk_hrp_%d", i))
	}
}
