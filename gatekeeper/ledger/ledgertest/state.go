package ledgertest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// The run's state machine: every transition (an admission, a revocation, a
// halt) and the one predicate, RunRecord.May, that the commit re-checks; a
// revoked booking or entitlement reaches its runs; a failed gate halts a
// run and consumes nothing; a booking belongs to one account.

// createUnder commits a train.create of account on booking under the
// entitlement ent, in stage pretrain, at base+2s.
func (f *fixture) createUnder(account, booking, key, ent string) ledger.Admission {
	f.t.Helper()
	a := f.create(account, booking, key, 8, 64)
	a.EntitlementJTI, a.Stage = ent, "pretrain"
	return f.commit(a)
}

// step returns a train.restart (from step 500) or a train.stage.advance
// (pretrain → sft) of run by account on booking at at, under the
// entitlement ent, with a deposited confirmation bound to it.
func (f *fixture) step(account, booking, run, key, ent string, action api.Action, at time.Time) ledger.Admission {
	f.t.Helper()
	a := f.lifecycle(account, action, booking, run, key, at)
	a.RunID, a.ManifestDigest, a.EntitlementJTI = run, "", ent
	if action == api.TrainRestart {
		a.State, a.CheckpointStep = api.StateRestartAdmitted, 500
	} else {
		a.State, a.FromStage, a.Stage = api.StateStageAdvanced, "pretrain", "sft"
	}
	return a
}

// halt is a halt of run (acct_42 on booking) in stage pretrain at at.
func halt(run, booking string, at time.Time) ledger.Halt {
	return ledger.Halt{RunID: run, Account: "acct_42", BookingID: booking, RunHalt: ledger.RunHalt{
		At: at, DecisionID: "dec_halt_" + run[4:12], Stage: "pretrain", ReportDigest: digest("report-" + run),
		FailedEvals: []string{"hellaswag_acc", "mmlu_5shot"}, By: "eval-key-1"}}
}

func (f *fixture) revoke(kind ledger.RevocationKind, subject string, at time.Time) ledger.Revocation {
	f.t.Helper()
	r := ledger.Revocation{Kind: kind, Subject: subject, Reason: "term breach", RevokedBy: "revoker-1",
		RevokedAt: at, ExpiresAt: at.Add(time.Hour), DecisionID: "dec_rev_" + subject}
	stored, _, err := f.s.Revoke(f.ctx, r)
	if err != nil {
		f.t.Fatalf("Revoke(%s %s): %v", kind, subject, err)
	}
	return stored
}

func (f *fixture) wantRunState(run string, at time.Time, want api.RunState) ledger.RunRecord {
	f.t.Helper()
	r, err := f.s.RunRecord(f.ctx, run)
	if err != nil || r.State(at) != want {
		f.t.Fatalf("RunRecord(%s).State(%s) = %q (%+v, %v), want %q", run, at, r.State(at), r, err, want)
	}
	return r
}

// wantEvents asserts run's events are want, in order.
func (f *fixture) wantEvents(run string, want ...ledger.RunEvent) {
	f.t.Helper()
	got, err := f.s.RunEvents(f.ctx, run)
	norm := func(es []ledger.RunEvent) []ledger.RunEvent {
		out := slices.Clone(es)
		for i := range out {
			out[i].At = out[i].At.UTC()
		}
		return out
	}
	if err != nil || !reflect.DeepEqual(norm(got), norm(want)) {
		f.t.Fatalf("RunEvents(%s) = %v\n%+v\nwant\n%+v", run, err, got, want)
	}
}

// wantRefused asserts a's commit is refused with target and wrote nothing.
func (f *fixture) wantRefused(what string, a ledger.Admission, target error) error {
	f.t.Helper()
	_, _, err := f.s.Commit(f.ctx, a)
	wantErr(f.t, what, err, target)
	f.wantNothingOnRun(a)
	return err
}

// testRunStateTransitions: create, advance, restart, cancel and a cleanup
// after the cancel each write their event with the run's new state (the
// cleanup none: it changed nothing); the record's stage, restarts and end
// follow; State answers at each instant and expired after the declared end.
func testRunStateTransitions(t *testing.T, f *fixture) {
	create := f.createUnder("acct_42", "bk_state", "create", "ent-state")
	r := f.wantRunState(create.RunID, create.CreatedAt, api.RunLive)
	if r.EntitlementJTI != "ent-state" || r.Stage != "pretrain" || r.Restarts != 0 {
		t.Fatalf("created run %+v", r)
	}
	at := create.CreatedAt.Add(time.Minute)
	adv := f.commit(f.step("acct_42", "bk_state", create.RunID, "adv", "ent-state", api.TrainStageAdvance, at))
	restart := f.commit(f.step("acct_42", "bk_state", create.RunID, "restart", "ent-state", api.TrainRestart, at.Add(time.Minute)))
	r = f.wantRunState(create.RunID, restart.CreatedAt, api.RunLive)
	if r.Stage != "sft" || r.Restarts != 1 || r.LastCheckpointStep != 500 {
		t.Fatalf("after advance and restart: %+v, want stage sft, 1 restart from 500", r)
	}
	cancelAt := at.Add(2 * time.Minute)
	cancel := f.commit(f.lifecycle("acct_42", api.TrainCancel, "bk_state", create.RunID, "cancel", cancelAt))
	cleanup := f.commit(f.lifecycle("acct_42", api.TrainCleanup, "bk_state", create.RunID, "cleanup", cancelAt.Add(time.Minute)))
	f.wantRunState(create.RunID, cancelAt, api.RunCancelled)
	f.wantRunState(create.RunID, cancelAt.Add(-time.Microsecond), api.RunLive) // decided before the cancel
	f.wantEvents(create.RunID,
		ledger.AdmissionEvent(create, create.RunID, true),
		ledger.AdmissionEvent(adv, create.RunID, true),
		ledger.AdmissionEvent(restart, create.RunID, true),
		ledger.AdmissionEvent(cancel, create.RunID, true),
		ledger.AdmissionEvent(cleanup, create.RunID, false))
	if e, _ := f.s.RunEvents(f.ctx, create.RunID); e[1].To != api.RunLive || e[1].Stage != "sft" ||
		e[2].CheckpointStep != 500 || e[3].To != api.RunCancelled || e[4].To != "" || e[3].DecisionID != cancel.DecisionID {
		t.Fatalf("events %+v", e)
	}

	// Expired: past its declared end, with no event.
	other := f.createUnder("acct_42", "bk_state", "other", "ent-state")
	f.wantRunState(other.RunID, other.LiveUntil.Add(-time.Microsecond), api.RunLive)
	f.wantRunState(other.RunID, other.LiveUntil, api.RunExpired)
	late := f.step("acct_42", "bk_state", other.RunID, "late", "ent-state", api.TrainRestart, other.LiveUntil)
	err := f.wantRefused("restart after the declared end", late, ledger.ErrRunEnded)
	if e, ok := errors.AsType[*ledger.RunEndedError](err); !ok || e.State != api.RunExpired {
		t.Fatalf("restart after the declared end: %v, want a RunEndedError naming expired", err)
	}
	f.wantEvents(other.RunID, ledger.AdmissionEvent(other, other.RunID, true))
	if ev, err := f.s.RunEvents(f.ctx, ledger.NewRunID()); err != nil || len(ev) != 0 {
		t.Fatalf("RunEvents(unknown) = %+v, %v; want none", ev, err)
	}
}

// testRevokedBookingRevokesRuns: a booking revocation revokes its live runs
// (not an ended one) in the same transaction, each with its event; a
// restart or advance of a revoked run is refused with the revocation,
// writing nothing; cancel and cleanup stay admissible and end it; a second
// revocation changes nothing.
func testRevokedBookingRevokesRuns(t *testing.T, f *fixture) {
	a := f.createUnder("acct_42", "bk_revr", "a", "ent-a")
	b := f.createUnder("acct_42", "bk_revr", "b", "ent-b")
	ended := f.createUnder("acct_42", "bk_revr", "ended", "ent-a")
	at := a.CreatedAt.Add(time.Minute)
	f.commit(f.lifecycle("acct_42", api.TrainCancel, "bk_revr", ended.RunID, "cancel-ended", at))
	other := f.createUnder("acct_42", "bk_revr_other", "other", "ent-a2")

	rv := f.revoke(ledger.RevokeBooking, "bk_revr", at.Add(time.Minute))
	for _, run := range []ledger.Admission{a, b} {
		r := f.wantRunState(run.RunID, at.Add(2*time.Minute), api.RunRevoked)
		want := ledger.RunRevocation{At: rv.RevokedAt, Kind: ledger.RevokeBooking, Subject: "bk_revr", By: "revoker-1",
			Reason: "term breach", DecisionID: "dec_rev_bk_revr"}
		if !r.Revocation.At.Equal(want.At) || r.Revocation.Kind != want.Kind || r.Revocation.Subject != want.Subject ||
			r.Revocation.By != want.By || r.Revocation.Reason != want.Reason || r.Revocation.DecisionID != want.DecisionID {
			t.Fatalf("run %s revocation %+v, want %+v", run.RunID, r.Revocation, want)
		}
		f.wantEvents(run.RunID, ledger.AdmissionEvent(run, run.RunID, true), ledger.RevocationEvent(run.RunID, rv))
		if !r.Live(at.Add(2 * time.Minute)) {
			t.Fatalf("a revoked run holds its GPUs until a teardown: %+v", r)
		}
	}
	f.wantRunState(ended.RunID, at.Add(2*time.Minute), api.RunCancelled)
	f.wantRunState(other.RunID, at.Add(2*time.Minute), api.RunLive)
	if r, _ := f.s.RunRecord(f.ctx, ended.RunID); !r.Revocation.At.IsZero() {
		t.Fatalf("an ended run was revoked: %+v", r)
	}

	stepAt := at.Add(3 * time.Minute)
	for _, action := range []api.Action{api.TrainRestart, api.TrainStageAdvance} {
		// Under another entitlement than the revoked booking's runs'.
		s := f.step("acct_42", "bk_revr", a.RunID, "step-"+string(action), "ent-fresh", action, stepAt)
		err := f.wantRefused(string(action)+" of a revoked run", s, ledger.ErrRevoked)
		if re, ok := errors.AsType[*ledger.RevocationError](err); !ok || re.Revocation.Kind != ledger.RevokeBooking {
			t.Fatalf("%s of a revoked run: %v, want a booking RevocationError", action, err)
		}
	}
	// Again, once the revocation itself is swept (past its expiry): the
	// run stays revoked.
	if _, err := f.s.Sweep(f.ctx, rv.ExpiresAt.Add(time.Minute), 0); err != nil {
		t.Fatal(err)
	}
	s := f.step("acct_42", "bk_revr", a.RunID, "step-after-sweep", "ent-fresh", api.TrainRestart, stepAt)
	f.wantRefused("restart of a revoked run after the sweep", s, ledger.ErrRevoked)

	cancel := f.commit(f.lifecycle("acct_42", api.TrainCancel, "bk_revr", a.RunID, "cancel-a", stepAt))
	f.wantRunState(a.RunID, stepAt, api.RunCancelled)
	cleanup := f.commit(f.lifecycle("acct_42", api.TrainCleanup, "bk_revr", b.RunID, "cleanup-b", stepAt))
	f.wantRunState(b.RunID, stepAt, api.RunCleanedUp)
	f.wantHeld("bk_revr", stepAt, 0)

	// A second revocation of the booking (the first was swept): its runs
	// ended, nothing new on them.
	if _, _, err := f.s.Revoke(f.ctx, ledger.Revocation{Kind: ledger.RevokeBooking, Subject: "bk_revr",
		RevokedBy: "revoker-2", RevokedAt: stepAt, ExpiresAt: stepAt.Add(time.Hour)}); err != nil {
		t.Fatalf("second revocation: %v", err)
	}
	f.wantEvents(a.RunID, ledger.AdmissionEvent(a, a.RunID, true), ledger.RevocationEvent(a.RunID, rv),
		ledger.AdmissionEvent(cancel, a.RunID, true))
	f.wantEvents(b.RunID, ledger.AdmissionEvent(b, b.RunID, true), ledger.RevocationEvent(b.RunID, rv),
		ledger.AdmissionEvent(cleanup, b.RunID, true))
}

// testRevokedEntitlementRevokesItsRuns: an entitlement revocation revokes
// the live runs admitted under it, on any booking, and no other run; a
// step of another run that carries the revoked entitlement is refused too;
// a caller key revocation refuses that key's admissions and revokes no run.
func testRevokedEntitlementRevokesItsRuns(t *testing.T, f *fixture) {
	a := f.createUnder("acct_42", "bk_ent", "a", "ent-x")
	b := f.createUnder("acct_42", "bk_ent", "b", "ent-y")
	at := a.CreatedAt.Add(time.Minute)
	rv := f.revoke(ledger.RevokeEntitlement, "ent-x", at)
	f.wantRunState(a.RunID, at, api.RunRevoked)
	f.wantRunState(b.RunID, at, api.RunLive)
	f.wantEvents(a.RunID, ledger.AdmissionEvent(a, a.RunID, true), ledger.RevocationEvent(a.RunID, rv))

	f.wantRefused("restart of a run admitted under a revoked entitlement",
		f.step("acct_42", "bk_ent", a.RunID, "restart-a", "ent-y", api.TrainRestart, at), ledger.ErrRevoked)
	f.wantRefused("restart carrying a revoked entitlement",
		f.step("acct_42", "bk_ent", b.RunID, "restart-b-x", "ent-x", api.TrainRestart, at), ledger.ErrRevoked)
	f.commit(f.step("acct_42", "bk_ent", b.RunID, "restart-b", "ent-y", api.TrainRestart, at))

	// A caller key: that key's admissions are refused, no run is revoked.
	f.revoke(ledger.RevokeCallerKey, "caller-key-1", at)
	f.wantRunState(b.RunID, at.Add(time.Second), api.RunLive)
	f.wantRefused("restart with a revoked caller key",
		f.step("acct_42", "bk_ent", b.RunID, "restart-b-key", "ent-y", api.TrainRestart, at.Add(time.Second)), ledger.ErrRevoked)
	rotated := f.step("acct_42", "bk_ent", b.RunID, "restart-b-rotated", "ent-y", api.TrainRestart, at.Add(time.Second))
	rotated.CallerKeyID = "caller-key-2"
	f.commit(rotated)
	if r := f.wantRunState(b.RunID, at.Add(time.Second), api.RunLive); r.Restarts != 2 {
		t.Fatalf("run after two restarts: %+v", r)
	}
}

// testHaltRun: a failed gate halts a live run in the stage it failed, with
// its event and no confirmation consumed; a halted run is refused every
// step (ErrRunHalted naming the failed evals) and keeps holding its GPUs;
// a teardown ends it; a second halt changes nothing; a halt of a run in
// another stage, ended, revoked, unknown, of another account or malformed
// writes nothing.
func testHaltRun(t *testing.T, f *fixture) {
	a := f.createUnder("acct_42", "bk_halt", "a", "ent-h")
	at := a.CreatedAt.Add(time.Minute)
	spare := f.deposit("acct_42", api.TrainCreate) // a confirmation nobody uses: a halt consumes nothing
	h := halt(a.RunID, "bk_halt", at)
	r, halted, err := f.s.HaltRun(f.ctx, h)
	if err != nil || !halted || r.State(at) != api.RunHalted || !r.Halt.At.Equal(at) || r.Halt.DecisionID != h.DecisionID ||
		r.Halt.Stage != "pretrain" || r.Halt.ReportDigest != h.ReportDigest || !slices.Equal(r.Halt.FailedEvals, h.FailedEvals) ||
		r.Halt.By != "eval-key-1" {
		t.Fatalf("HaltRun = %+v, %v, %v; want the run halted by %+v", r, halted, err, h)
	}
	stored := f.wantRunState(a.RunID, at, api.RunHalted)
	if !stored.Equal(r) {
		t.Fatalf("RunRecord after the halt = %+v, want %+v", stored, r)
	}
	f.wantHeld("bk_halt", at, 8)
	f.wantConfirmation(spare.Ref, spare)
	for _, action := range []api.Action{api.TrainRestart, api.TrainStageAdvance} {
		s := f.step("acct_42", "bk_halt", a.RunID, "step-"+string(action), "ent-h", action, at.Add(time.Second))
		err := f.wantRefused(string(action)+" of a halted run", s, ledger.ErrRunHalted)
		if he, ok := errors.AsType[*ledger.RunHaltedError](err); !ok || !slices.Equal(he.Halt.FailedEvals, h.FailedEvals) {
			t.Fatalf("%s of a halted run: %v, want a RunHaltedError naming the failed evals", action, err)
		}
	}
	again := h
	again.At, again.DecisionID = at.Add(time.Second), "dec_halt_again"
	if r, halted, err := f.s.HaltRun(f.ctx, again); err != nil || halted || r.Halt.DecisionID != h.DecisionID {
		t.Fatalf("second HaltRun = %+v, %v, %v; want the first halt kept", r, halted, err)
	}
	cancel := f.commit(f.lifecycle("acct_42", api.TrainCancel, "bk_halt", a.RunID, "cancel", at.Add(2*time.Second)))
	f.wantRunState(a.RunID, at.Add(2*time.Second), api.RunCancelled)
	f.wantEvents(a.RunID, ledger.AdmissionEvent(a, a.RunID, true), ledger.HaltEvent(h),
		ledger.AdmissionEvent(cancel, a.RunID, true))
	if _, _, err := f.s.HaltRun(f.ctx, halt(a.RunID, "bk_halt", at.Add(3*time.Second))); err != nil {
		t.Fatalf("HaltRun of the cancelled, halted run = %v, want no error (already halted)", err)
	}

	moved := f.createUnder("acct_42", "bk_halt", "moved", "ent-h")
	f.commit(f.step("acct_42", "bk_halt", moved.RunID, "adv-moved", "ent-h", api.TrainStageAdvance, at))
	ended := f.createUnder("acct_42", "bk_halt", "ended", "ent-h")
	f.commit(f.lifecycle("acct_42", api.TrainCleanup, "bk_halt", ended.RunID, "cleanup-ended", at))
	revoked := f.createUnder("acct_42", "bk_halt", "revoked", "ent-r")
	f.revoke(ledger.RevokeEntitlement, "ent-r", at)
	live := f.createUnder("acct_42", "bk_halt", "live", "ent-h")
	otherAccount := halt(live.RunID, "bk_halt", at.Add(time.Second))
	otherAccount.Account = "acct_43"
	for name, tc := range map[string]struct {
		h    ledger.Halt
		want error
	}{
		"stage the run left":  {halt(moved.RunID, "bk_halt", at.Add(time.Second)), ledger.ErrStageConflict},
		"ended run":           {halt(ended.RunID, "bk_halt", at.Add(time.Second)), ledger.ErrRunEnded},
		"revoked run":         {halt(revoked.RunID, "bk_halt", at.Add(time.Second)), ledger.ErrRevoked},
		"unknown run":         {halt(ledger.NewRunID(), "bk_halt", at), ledger.ErrNotFound},
		"another account":     {otherAccount, ledger.ErrConfirmationMismatch},
		"another booking":     {halt(live.RunID, "bk_other", at.Add(time.Second)), ledger.ErrConfirmationMismatch},
		"no failed evals":     {func() ledger.Halt { x := halt(live.RunID, "bk_halt", at); x.FailedEvals = nil; return x }(), ledger.ErrInvalid},
		"unsorted failed":     {func() ledger.Halt { x := halt(live.RunID, "bk_halt", at); x.FailedEvals = []string{"b", "a"}; return x }(), ledger.ErrInvalid},
		"report not a digest": {func() ledger.Halt { x := halt(live.RunID, "bk_halt", at); x.ReportDigest = "md5:1"; return x }(), ledger.ErrInvalid},
		"zero time":           {func() ledger.Halt { x := halt(live.RunID, "bk_halt", at); x.At = time.Time{}; return x }(), ledger.ErrInvalid},
	} {
		before, _ := f.s.RunEvents(f.ctx, tc.h.RunID)
		_, halted, err := f.s.HaltRun(f.ctx, tc.h)
		if halted || !errors.Is(err, tc.want) {
			t.Fatalf("%s: HaltRun = %v, %v; want %v", name, halted, err, tc.want)
		}
		if after, _ := f.s.RunEvents(f.ctx, tc.h.RunID); len(after) != len(before) {
			t.Fatalf("%s: HaltRun wrote an event: %+v", name, after)
		}
	}
	f.wantRunState(live.RunID, at.Add(time.Second), api.RunLive)
	f.wantRunState(moved.RunID, at.Add(time.Second), api.RunLive)
}

// testBookingBoundToOneAccount: a booking belongs to the account of its
// first admission; another account's create, release, cancel or step on
// it is refused, writing nothing, and leaves the account's runs live; a
// booking first named by a release is bound by it.
func testBookingBoundToOneAccount(t *testing.T, f *fixture) {
	a := f.createUnder("acct_42", "bk_own", "a", "ent-own")
	at := a.CreatedAt.Add(time.Minute)
	if u, err := f.s.BookingUsage(f.ctx, "bk_own", at); err != nil || u.Account != "acct_42" || u.HeldGPUs != 8 {
		t.Fatalf("BookingUsage = %+v, %v; want bound to acct_42 holding 8", u, err)
	}
	if u, err := f.s.BookingUsage(f.ctx, "bk_never", at); err != nil || u.Account != "" {
		t.Fatalf("BookingUsage(unknown booking) = %+v, %v; want unbound", u, err)
	}
	theirs := f.create("acct_43", "bk_own", "theirs", 8, 64)
	wantErr(t, "another account's create", f.commitErr(theirs), ledger.ErrBookingAccount)
	f.wantNothingFrom(theirs)
	f.wantState(theirs.ConfirmationRef, ledger.ConfirmationAvailable, "")
	release := f.lifecycle("acct_43", api.BookingRelease, "bk_own", "", "their-release", at)
	wantErr(t, "another account's release", f.commitErr(release), ledger.ErrBookingAccount)
	f.wantNoAdmission("acct_43", "their-release")
	f.wantRunState(a.RunID, at, api.RunLive)
	f.wantHeld("bk_own", at, 8)
	if u, _ := f.s.BookingUsage(f.ctx, "bk_own", at); !u.Released.IsZero() {
		t.Fatalf("another account's release released the booking: %+v", u)
	}
	// Their cancel of the run: the confirmation names this account's run on
	// this booking; the run is not theirs either way.
	cancel := f.lifecycle("acct_43", api.TrainCancel, "bk_own", a.RunID, "their-cancel", at)
	if err := f.commitErr(cancel); !errors.Is(err, ledger.ErrBookingAccount) && !errors.Is(err, ledger.ErrConfirmationMismatch) {
		t.Fatalf("another account's cancel: %v", err)
	}
	f.wantRunState(a.RunID, at, api.RunLive)

	// A booking first named by a release belongs to the releasing account.
	f.commit(f.lifecycle("acct_43", api.BookingRelease, "bk_first_release", "", "first-release", at))
	if u, _ := f.s.BookingUsage(f.ctx, "bk_first_release", at); u.Account != "acct_43" || !u.Released.Equal(at) {
		t.Fatalf("booking first named by a release: %+v", u)
	}
	late := f.create("acct_42", "bk_first_release", "late", 8, 64)
	wantErr(t, "create on another account's released booking", f.commitErr(late), ledger.ErrBookingAccount)
	f.wantNothingFrom(late)
	// The owner's own release still works and ends its run.
	f.commit(f.lifecycle("acct_42", api.BookingRelease, "bk_own", "", "own-release", at))
	f.wantRunState(a.RunID, at, api.RunReleased)
}

func (f *fixture) commitErr(a ledger.Admission) error {
	_, _, err := f.s.Commit(f.ctx, a)
	return err
}

// RaceRevokeRestart races n restarts of one live run (each with its own
// confirmation and key, spread over stores) against a revocation of its
// booking. Every restart either committed before the revocation (its event
// comes before the revocation's) or was refused with ErrRevoked, writing
// nothing; the run ends revoked, with one revocation event.
func RaceRevokeRestart(t *testing.T, stores []ledger.Store, booking string, n int) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	run := f.createUnder("acct_42", booking, booking+"-create", "ent-"+booking)
	at := run.CreatedAt.Add(time.Minute)
	attempts := make([]ledger.Admission, n)
	for i := range attempts {
		attempts[i] = f.step("acct_42", booking, run.RunID, fmt.Sprintf("%s-restart-%d", booking, i), "ent-"+booking,
			api.TrainRestart, at)
	}
	errs := make([]error, n)
	var rerr error
	race(n+1, func(i int) {
		if i == n {
			_, _, rerr = stores[i%len(stores)].Revoke(t.Context(), ledger.Revocation{Kind: ledger.RevokeBooking,
				Subject: booking, RevokedBy: "revoker-1", RevokedAt: at, ExpiresAt: at.Add(time.Hour)})
			return
		}
		_, _, errs[i] = stores[i%len(stores)].Commit(t.Context(), attempts[i])
	})
	if rerr != nil {
		t.Fatalf("Revoke: %v", rerr)
	}
	f.raceOutcome(run, attempts, errs, ledger.ErrRevoked, api.RunRevoked)
}

// RaceHaltRestart races n restarts of one live run against its halt: the
// same outcome as RaceRevokeRestart, with ErrRunHalted.
func RaceHaltRestart(t *testing.T, stores []ledger.Store, booking string, n int) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	run := f.createUnder("acct_42", booking, booking+"-create", "ent-"+booking)
	at := run.CreatedAt.Add(time.Minute)
	attempts := make([]ledger.Admission, n)
	for i := range attempts {
		attempts[i] = f.step("acct_42", booking, run.RunID, fmt.Sprintf("%s-restart-%d", booking, i), "ent-"+booking,
			api.TrainRestart, at)
	}
	errs := make([]error, n)
	var (
		herr   error
		halted bool
	)
	race(n+1, func(i int) {
		if i == n {
			_, halted, herr = stores[i%len(stores)].HaltRun(t.Context(), halt(run.RunID, booking, at))
			return
		}
		_, _, errs[i] = stores[i%len(stores)].Commit(t.Context(), attempts[i])
	})
	if herr != nil || !halted {
		t.Fatalf("HaltRun = %v, %v; want the live run halted", halted, herr)
	}
	f.raceOutcome(run, attempts, errs, ledger.ErrRunHalted, api.RunHalted)
}

// raceOutcome checks a race of step attempts on run against the transition
// to state: each attempt committed before the transition's event, or was
// refused with lost and wrote nothing.
func (f *fixture) raceOutcome(run ledger.Admission, attempts []ledger.Admission, errs []error, lost error, state api.RunState) {
	f.t.Helper()
	events, err := f.s.RunEvents(f.ctx, run.RunID)
	if err != nil {
		f.t.Fatal(err)
	}
	pos := map[string]int{}
	transition := -1
	for i, e := range events {
		pos[e.DecisionID] = i
		if e.To == state {
			if transition >= 0 {
				f.t.Fatalf("two %s events: %+v", state, events)
			}
			transition = i
		}
	}
	if transition < 0 {
		f.t.Fatalf("no %s event: %+v", state, events)
	}
	committed := 0
	for i, a := range attempts {
		switch {
		case errs[i] == nil:
			committed++
			if p, ok := pos[a.DecisionID]; !ok || p > transition {
				f.t.Fatalf("restart %d committed after the run was %s (events %+v)", i, state, events)
			}
		case errors.Is(errs[i], lost):
			f.wantNothingOnRun(a)
		default:
			f.t.Fatalf("restart %d: %v, want nil or %v", i, errs[i], lost)
		}
	}
	r := f.wantRunState(run.RunID, attempts[0].CreatedAt, state)
	if r.Restarts != committed || len(events) != committed+2 {
		f.t.Fatalf("%d restarts committed; run %+v with %d events", committed, r, len(events))
	}
}

// RaceRevokeCreate races n creates under one entitlement (each on its own
// booking, spread over stores) against the entitlement's revocation: every
// create either committed and its run is revoked, or was refused with
// ErrRevoked and wrote nothing. No run admitted under a revoked
// entitlement stays live.
func RaceRevokeCreate(t *testing.T, stores []ledger.Store, ent string, n int) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	attempts := make([]ledger.Admission, n)
	for i := range attempts {
		attempts[i] = f.create("acct_42", fmt.Sprintf("bk_%s_%d", ent, i%3), fmt.Sprintf("%s-create-%d", ent, i), 1, 64)
		attempts[i].EntitlementJTI = ent
	}
	at := attempts[0].CreatedAt
	errs := make([]error, n)
	var rerr error
	race(n+1, func(i int) {
		if i == n {
			_, _, rerr = stores[i%len(stores)].Revoke(t.Context(), ledger.Revocation{Kind: ledger.RevokeEntitlement,
				Subject: ent, RevokedBy: "revoker-1", RevokedAt: at, ExpiresAt: at.Add(time.Hour)})
			return
		}
		_, _, errs[i] = stores[i%len(stores)].Commit(t.Context(), attempts[i])
	})
	if rerr != nil {
		t.Fatalf("Revoke: %v", rerr)
	}
	for i, a := range attempts {
		switch {
		case errs[i] == nil:
			f.wantRunState(a.RunID, at, api.RunRevoked)
		case errors.Is(errs[i], ledger.ErrRevoked):
			f.wantNothingFrom(a)
		default:
			t.Fatalf("create %d: %v, want nil or ErrRevoked", i, errs[i])
		}
	}
}

// RaceHaltAdvance races a stage advance out of a run's stage against its
// halt in that stage: exactly one wins — the halt (the advance refused with
// ErrRunHalted) or the advance (the halt refused with ErrStageConflict).
func RaceHaltAdvance(t *testing.T, stores []ledger.Store, booking string) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	run := f.createUnder("acct_42", booking, booking+"-create", "ent-"+booking)
	at := run.CreatedAt.Add(time.Minute)
	adv := f.step("acct_42", booking, run.RunID, booking+"-adv", "ent-"+booking, api.TrainStageAdvance, at)
	var aerr, herr error
	var halted bool
	race(2, func(i int) {
		if i == 0 {
			_, _, aerr = stores[0].Commit(t.Context(), adv)
			return
		}
		_, halted, herr = stores[1%len(stores)].HaltRun(t.Context(), halt(run.RunID, booking, at))
	})
	switch {
	case aerr == nil && errors.Is(herr, ledger.ErrStageConflict) && !halted:
		f.wantRunState(run.RunID, at, api.RunLive)
	case herr == nil && halted && errors.Is(aerr, ledger.ErrRunHalted):
		f.wantRunState(run.RunID, at, api.RunHalted)
		f.wantNothingOnRun(adv)
	default:
		t.Fatalf("advance %v, halt %v (halted %v): want exactly one to win", aerr, herr, halted)
	}
}

func testRaceRevokeRestart(t *testing.T, f *fixture) {
	for _, n := range []int{2, 10, 30} {
		RaceRevokeRestart(t, []ledger.Store{f.s}, fmt.Sprintf("bk_rr_%d", n), n)
	}
}

func testRaceHaltRestart(t *testing.T, f *fixture) {
	for _, n := range []int{2, 10, 30} {
		RaceHaltRestart(t, []ledger.Store{f.s}, fmt.Sprintf("bk_hr_%d", n), n)
	}
}

func testRaceRevokeCreate(t *testing.T, f *fixture) {
	for _, n := range []int{2, 10, 30} {
		RaceRevokeCreate(t, []ledger.Store{f.s}, fmt.Sprintf("ent-race-%d", n), n)
	}
}

func testRaceHaltAdvance(t *testing.T, f *fixture) {
	for i := range 10 {
		RaceHaltAdvance(t, []ledger.Store{f.s}, fmt.Sprintf("bk_ha_%d", i))
	}
}

// RunLifeHistory writes runs through every transition an admission makes
// (advance, restarts, cancel, cleanup after cancel, release) on bookings of
// its own and returns a function that checks, on s or on a store holding
// the same records (a migrated copy), that an entitlement revocation
// reaches the live run admitted under it and that it can no longer
// restart. The returned function writes, so call it once.
func RunLifeHistory(t *testing.T, s ledger.Store) func(t *testing.T, s ledger.Store) {
	t.Helper()
	f := &fixture{t: t, s: s, ctx: t.Context()}
	a := f.createUnder("acct_42", "bk_life_hist", "lh-a", "ent-lh-a")
	b := f.createUnder("acct_42", "bk_life_hist", "lh-b", "ent-lh-b")
	c := f.createUnder("acct_42", "bk_life_hist_rel", "lh-c", "ent-lh-c")
	at := a.CreatedAt.Add(time.Minute)
	f.commit(f.step("acct_42", "bk_life_hist", a.RunID, "lh-a-adv", "ent-lh-a", api.TrainStageAdvance, at))
	f.commit(f.step("acct_42", "bk_life_hist", a.RunID, "lh-a-r1", "ent-lh-a", api.TrainRestart, at.Add(time.Second)))
	r2 := f.step("acct_42", "bk_life_hist", a.RunID, "lh-a-r2", "ent-lh-a", api.TrainRestart, at.Add(2*time.Second))
	r2.CheckpointStep = 1000
	f.commit(r2)
	f.commit(f.lifecycle("acct_42", api.TrainCancel, "bk_life_hist", b.RunID, "lh-b-cancel", at))
	f.commit(f.lifecycle("acct_42", api.TrainCleanup, "bk_life_hist", b.RunID, "lh-b-cleanup", at.Add(time.Second)))
	f.commit(f.lifecycle("acct_42", api.BookingRelease, "bk_life_hist_rel", "", "lh-c-release", at))
	return func(t *testing.T, s ledger.Store) {
		f := &fixture{t: t, s: s, ctx: t.Context()}
		r := f.wantRunState(a.RunID, at.Add(time.Minute), api.RunLive)
		if r.Restarts != 2 || r.LastCheckpointStep != 1000 || r.Stage != "sft" || r.EntitlementJTI != "ent-lh-a" {
			t.Fatalf("run %+v, want 2 restarts (last from 1000) in sft under ent-lh-a", r)
		}
		f.wantRunState(b.RunID, at.Add(time.Minute), api.RunCancelled)
		f.wantRunState(c.RunID, at.Add(time.Minute), api.RunReleased)
		f.revoke(ledger.RevokeEntitlement, "ent-lh-a", at.Add(time.Minute))
		f.wantRunState(a.RunID, at.Add(time.Minute), api.RunRevoked)
		f.wantRefused("restart of the revoked run",
			f.step("acct_42", "bk_life_hist", a.RunID, "lh-a-r3", "ent-lh-b", api.TrainRestart, at.Add(2*time.Minute)), ledger.ErrRevoked)
		if u, err := f.s.BookingUsage(f.ctx, "bk_life_hist", at); err != nil || u.Account != "acct_42" {
			t.Fatalf("BookingUsage = %+v, %v; want bound to acct_42", u, err)
		}
	}
}

func testRunLifeHistory(t *testing.T, f *fixture) {
	RunLifeHistory(t, f.s)(t, f.s)
}

// plan is the checkpoint plan of the example: a checkpoint every
// 500 of 1000 steps, 6 hours, 30 minutes lost per restart.
var plan = ledger.RunPlan{IntervalSteps: 500, Steps: 1000, WallClockSeconds: 6 * 3600, LostSecondsPerRestart: 1800}

// createPlanned commits a train.create under plan on booking.
func (f *fixture) createPlanned(booking, key string) ledger.Admission {
	f.t.Helper()
	a := f.create("acct_42", booking, key, 8, 64)
	a.EntitlementJTI, a.Stage, a.Plan = "ent-"+booking, "pretrain", plan
	stored := f.commit(a)
	if stored.Plan != (ledger.RunPlan{}) {
		f.t.Fatalf("Commit returned the plan %+v: it is recorded on the run, not with the admission", stored.Plan)
	}
	f.wantAdmission("acct_42", key, stored)
	return stored
}

// restartFrom is a restart of run from step with a budget.
func (f *fixture) restartFrom(run ledger.Admission, key string, step int64, budget int) ledger.Admission {
	f.t.Helper()
	a := f.step("acct_42", run.BookingID, run.RunID, key, run.EntitlementJTI, api.TrainRestart, run.CreatedAt.Add(time.Minute))
	a.CheckpointStep, a.RestartBudget = step, budget
	return a
}

// testRestartWithinPlan: a restart starts only from a step the run's
// checkpoint plan writes (a positive multiple of the interval within its
// steps), whatever the policy said; each restart's step is recorded on the
// run and in its events; a run without a plan (admitted before plans were
// recorded) is not checked; an invalid plan is refused.
func testRestartWithinPlan(t *testing.T, f *fixture) {
	run := f.createPlanned("bk_plan", "create")
	if r := f.wantRunState(run.RunID, run.CreatedAt, api.RunLive); r.Plan != plan {
		t.Fatalf("RunRecord.Plan = %+v, want %+v", r.Plan, plan)
	}
	for _, step := range []int64{0, 7, 499, 501, 1500, 1<<53 - 1} {
		a := f.restartFrom(run, fmt.Sprintf("off-%d", step), step, 0)
		err := f.wantRefused(fmt.Sprintf("restart from step %d", step), a, ledger.ErrRestartOffPlan)
		if re, ok := errors.AsType[*ledger.RestartError](err); !ok || re.Step != step || re.Plan != plan {
			t.Fatalf("restart from step %d: %v, want a RestartError naming the step and the plan", step, err)
		}
	}
	var events []ledger.RunEvent
	for i, step := range []int64{500, 1000, 500} {
		a := f.commit(f.restartFrom(run, fmt.Sprintf("on-%d-%d", step, i), step, 0))
		events = append(events, ledger.AdmissionEvent(a, run.RunID, true))
		r := f.wantRunState(run.RunID, run.CreatedAt, api.RunLive)
		if r.Restarts != i+1 || r.LastCheckpointStep != step {
			t.Fatalf("after restart %d from %d: %+v", i+1, step, r)
		}
	}
	f.wantEvents(run.RunID, append([]ledger.RunEvent{ledger.AdmissionEvent(run, run.RunID, true)}, events...)...)

	// A run without a plan: its steps are not checked.
	legacy := f.createUnder("acct_42", "bk_plan", "legacy", "ent-legacy")
	f.commit(f.restartFrom(legacy, "legacy-7", 7, 0))
	f.commit(f.restartFrom(legacy, "legacy-2^40", 1<<40, 2))
	if r := f.wantRunState(legacy.RunID, legacy.CreatedAt, api.RunLive); r.Restarts != 2 || r.LastCheckpointStep != 1<<40 {
		t.Fatalf("run without a plan after two restarts: %+v", r)
	}

	for name, p := range map[string]ledger.RunPlan{
		"negative steps":   {IntervalSteps: 500, Steps: -1},
		"interval only":    {IntervalSteps: 500},
		"negative seconds": {IntervalSteps: 500, Steps: 1000, LostSecondsPerRestart: -1},
	} {
		a := f.create("acct_42", "bk_plan", "bad-"+name, 8, 64)
		a.Plan = p
		_, _, err := f.s.Commit(f.ctx, a)
		wantErr(t, name, err, ledger.ErrInvalid)
		f.wantNothingFrom(a)
	}
	bad := f.restartFrom(run, "plan-on-restart", 500, 0)
	bad.Plan = plan
	wantErr(t, "a plan on a restart", f.commitErr(bad), ledger.ErrInvalid)
	bad = f.create("acct_42", "bk_plan", "budget-on-create", 8, 64)
	bad.RestartBudget = 3
	wantErr(t, "a restart budget on a create", f.commitErr(bad), ledger.ErrInvalid)
}

// testRestartBudget: the decision's restart budget holds at commit: the
// restart past it is refused naming the figures, nothing written.
func testRestartBudget(t *testing.T, f *fixture) {
	run := f.createPlanned("bk_budget", "create")
	for i := range 3 {
		f.commit(f.restartFrom(run, fmt.Sprintf("r-%d", i), 500, 3))
	}
	over := f.restartFrom(run, "r-3", 500, 3)
	err := f.wantRefused("the fourth restart of a budget of 3", over, ledger.ErrRestartBudget)
	if re, ok := errors.AsType[*ledger.RestartError](err); !ok || re.Restarts != 3 || re.Budget != 3 {
		t.Fatalf("fourth restart: %v, want a RestartError naming 3 restarts of a budget of 3", err)
	}
	// A larger budget (another bundle) admits it.
	f.commit(f.restartFrom(run, "r-3-more", 500, 4))
	if r := f.wantRunState(run.RunID, run.CreatedAt, api.RunLive); r.Restarts != 4 {
		t.Fatalf("run %+v, want 4 restarts", r)
	}
}

// RaceRestartBudget races n restarts of one run, each with the budget k,
// spread over stores: exactly k commit, the others are refused with
// ErrRestartBudget and wrote nothing.
func RaceRestartBudget(t *testing.T, stores []ledger.Store, booking string, n, k int) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	run := f.createPlanned(booking, booking+"-create")
	attempts := make([]ledger.Admission, n)
	for i := range attempts {
		attempts[i] = f.restartFrom(run, fmt.Sprintf("%s-r-%d", booking, i), 1000, k)
	}
	errs := make([]error, n)
	race(n, func(i int) { _, _, errs[i] = stores[i%len(stores)].Commit(t.Context(), attempts[i]) })
	committed := 0
	for i, err := range errs {
		switch {
		case err == nil:
			committed++
		case errors.Is(err, ledger.ErrRestartBudget):
			f.wantNothingOnRun(attempts[i])
		default:
			t.Fatalf("restart %d: %v, want nil or ErrRestartBudget", i, err)
		}
	}
	if r := f.wantRunState(run.RunID, run.CreatedAt, api.RunLive); committed != k || r.Restarts != k {
		t.Fatalf("%d of %d restarts with a budget of %d committed; the run has %d", committed, n, k, r.Restarts)
	}
}

func testRaceRestartBudget(t *testing.T, f *fixture) {
	for _, n := range []int{2, 10, 30} {
		RaceRestartBudget(t, []ledger.Store{f.s}, fmt.Sprintf("bk_rb_%d", n), n, 1+n/3)
	}
}

// testListRuns: Runs lists an account's runs only, in run id order, on one
// booking when asked, a page at a time from a cursor; an invalid query is
// refused.
func testListRuns(t *testing.T, f *fixture) {
	var mine, onA []string
	for i := range 7 {
		booking := []string{"bk_list_a", "bk_list_b"}[i%2]
		a := f.createUnder("acct_42", booking, fmt.Sprintf("list-%d", i), "ent-list")
		mine = append(mine, a.RunID)
		if booking == "bk_list_a" {
			onA = append(onA, a.RunID)
		}
	}
	f.createUnder("acct_43", "bk_list_other", "theirs", "ent-theirs")
	slices.Sort(mine)
	slices.Sort(onA)
	page := func(q ledger.RunQuery) ([]string, bool) {
		t.Helper()
		runs, more, err := f.s.Runs(f.ctx, q)
		if err != nil {
			t.Fatalf("Runs(%+v): %v", q, err)
		}
		ids := make([]string, len(runs))
		for i, r := range runs {
			ids[i] = r.RunID
			if r.Account != q.Account || (q.BookingID != "" && r.BookingID != q.BookingID) {
				t.Fatalf("Runs(%+v) listed %+v", q, r)
			}
		}
		return ids, more
	}
	if ids, more := page(ledger.RunQuery{Account: "acct_42", Limit: ledger.MaxRunPage}); !slices.Equal(ids, mine) || more {
		t.Fatalf("all runs = %v (more %v), want %v", ids, more, mine)
	}
	var got []string
	after := ""
	for {
		ids, more := page(ledger.RunQuery{Account: "acct_42", After: after, Limit: 3})
		got = append(got, ids...)
		if !more {
			break
		}
		after = ids[len(ids)-1]
	}
	if !slices.Equal(got, mine) {
		t.Fatalf("paged runs = %v, want %v", got, mine)
	}
	if ids, _ := page(ledger.RunQuery{Account: "acct_42", BookingID: "bk_list_a", Limit: 2}); !slices.Equal(ids, onA[:2]) {
		t.Fatalf("runs on bk_list_a = %v, want %v", ids, onA[:2])
	}
	if ids, more := page(ledger.RunQuery{Account: "acct_42", After: mine[len(mine)-1], Limit: 5}); len(ids) != 0 || more {
		t.Fatalf("after the last run: %v, %v", ids, more)
	}
	if ids, _ := page(ledger.RunQuery{Account: "acct_44", Limit: 5}); len(ids) != 0 {
		t.Fatalf("an account without runs: %v", ids)
	}
	for name, q := range map[string]ledger.RunQuery{
		"no account":  {Limit: 5},
		"limit 0":     {Account: "acct_42"},
		"limit above": {Account: "acct_42", Limit: ledger.MaxRunPage + 1},
		"NUL cursor":  {Account: "acct_42", After: "run_\x00", Limit: 5},
	} {
		if _, _, err := f.s.Runs(f.ctx, q); !errors.Is(err, ledger.ErrInvalid) {
			t.Fatalf("Runs(%s) = %v, want ErrInvalid", name, err)
		}
	}
}
