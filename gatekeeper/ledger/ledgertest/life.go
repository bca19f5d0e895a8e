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

// The run's life, booking capacity, bindings and revocations.

// create returns a train.create admission on booking for gpus of booked
// GPUs, consuming a fresh confirmation bound to it.
func (f *fixture) create(account, booking, key string, gpus, booked int) ledger.Admission {
	f.t.Helper()
	c := f.confirmation(account, "train.create")
	c.BookingID = booking
	if err := f.s.DepositConfirmation(f.ctx, c); err != nil {
		f.t.Fatalf("DepositConfirmation: %v", err)
	}
	a := admission(c, key, "req-"+key)
	a.BookingID, a.GPUs, a.BookedGPUs = booking, gpus, booked
	return a
}

// lifecycle returns a cancel, cleanup or release admission of run on
// booking at t, consuming a fresh confirmation bound to it.
func (f *fixture) lifecycle(account string, action api.Action, booking, runID, key string, t time.Time) ledger.Admission {
	f.t.Helper()
	c := f.confirmation(account, action)
	c.BookingID, c.RunID = booking, runID
	if action == "booking.release" {
		c.RunID = ""
	}
	if err := f.s.DepositConfirmation(f.ctx, c); err != nil {
		f.t.Fatalf("DepositConfirmation: %v", err)
	}
	a := admission(c, key, "req-"+key)
	a.BookingID, a.CreatedAt = booking, t
	return a
}

func (f *fixture) wantRun(runID string, live bool, at time.Time) ledger.RunRecord {
	f.t.Helper()
	r, err := f.s.RunRecord(f.ctx, runID)
	if err != nil {
		f.t.Fatalf("RunRecord(%s): %v", runID, err)
	}
	if r.Live(at) != live {
		f.t.Fatalf("RunRecord(%s).Live(%s) = %v, want %v (%+v)", runID, at, !live, live, r)
	}
	return r
}

func (f *fixture) wantHeld(booking string, at time.Time, held int) {
	f.t.Helper()
	u, err := f.s.BookingUsage(f.ctx, booking, at)
	if err != nil || u.HeldGPUs != held {
		f.t.Fatalf("BookingUsage(%s, %s) = %+v, %v; want %d GPUs held", booking, at, u, err, held)
	}
}

// testRunRecordLife: train.create writes the run record (GPUs, live until);
// the run is live from its admission to LiveUntil; a cancel ends it and
// frees its GPUs, a second cancel changes nothing.
func testRunRecordLife(t *testing.T, f *fixture) {
	a := f.create("acct_42", "bk_life", "create", 16, 64)
	a.LiveUntil = a.CreatedAt.Add(2 * time.Hour)
	f.commit(a)
	r := f.wantRun(a.RunID, true, a.CreatedAt)
	want := ledger.RunRecord{RunID: a.RunID, Account: "acct_42", BookingID: "bk_life", ManifestDigest: a.ManifestDigest,
		GPUs: 16, BookedGPUs: 64, AdmittedAt: a.CreatedAt, LiveUntil: a.LiveUntil, EntitlementJTI: a.EntitlementJTI}
	if !r.Equal(want) {
		t.Fatalf("RunRecord = %+v, want %+v", r, want)
	}
	// A decision time a little behind the admission (another replica's
	// clock) still sees the stored run.
	f.wantRun(a.RunID, true, a.CreatedAt.Add(-time.Second))
	f.wantRun(a.RunID, false, a.LiveUntil)
	f.wantHeld("bk_life", a.CreatedAt.Add(time.Hour), 16)
	f.wantHeld("bk_life", a.LiveUntil, 0)
	stored, err := f.s.Admission(f.ctx, "acct_42", "create")
	if err != nil || stored.GPUs != 16 || stored.BookedGPUs != 64 || !stored.LiveUntil.Equal(a.LiveUntil) {
		t.Fatalf("Admission = %+v, %v; want GPUs 16 of 64 live until %s", stored, err, a.LiveUntil)
	}

	at := a.CreatedAt.Add(time.Hour)
	f.commit(f.lifecycle("acct_42", "train.cancel", "bk_life", a.RunID, "cancel", at))
	r = f.wantRun(a.RunID, false, at)
	if !r.EndedAt.Equal(at) || r.EndedBy != "train.cancel" {
		t.Fatalf("after cancel: %+v, want ended at %s by train.cancel", r, at)
	}
	f.wantRun(a.RunID, true, at.Add(-time.Second)) // live before the cancel
	f.wantHeld("bk_life", at, 0)
	// A cleanup afterwards is admitted but keeps how the run ended.
	f.commit(f.lifecycle("acct_42", "train.cleanup", "bk_life", a.RunID, "cleanup", at.Add(time.Minute)))
	if r2 := f.wantRun(a.RunID, false, at); !r2.EndedAt.Equal(at) || r2.EndedBy != "train.cancel" {
		t.Fatalf("after cleanup: %+v, want still ended by the cancel", r2)
	}
	if _, err := f.s.RunRecord(f.ctx, ledger.NewRunID()); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("RunRecord(unknown) = %v, want ErrNotFound", err)
	}
}

// testCheckpointQuota: the booking's live runs share its checkpoint storage
// quota; two runs that each fit but together keep more than it are refused
// at commit (ErrStorageQuotaExceeded, nothing written); the run records keep
// their checkpoint GiB and the usage sums them; a run that ended frees its
// share; a create without a known quota (0) is not checked.
func testCheckpointQuota(t *testing.T, f *fixture) {
	first := f.create("acct_42", "bk_ckq", "first", 8, 64)
	first.Plan = ledger.RunPlan{IntervalSteps: 100, Steps: 1000, CheckpointGiB: 600, StorageQuotaGiB: 1000}
	f.commit(first)
	if r := f.wantRun(first.RunID, true, first.CreatedAt); r.Plan.CheckpointGiB != 600 || r.Plan.StorageQuotaGiB != 1000 {
		t.Fatalf("RunRecord.Plan = %+v, want 600 GiB of a 1000 GiB quota", r.Plan)
	}
	if u, err := f.s.BookingUsage(f.ctx, "bk_ckq", first.CreatedAt); err != nil || u.HeldCheckpointGiB != 600 {
		t.Fatalf("BookingUsage = %+v, %v; want 600 GiB held", u, err)
	}

	second := f.create("acct_42", "bk_ckq", "second", 8, 64)
	second.Plan = ledger.RunPlan{IntervalSteps: 100, Steps: 1000, CheckpointGiB: 500, StorageQuotaGiB: 1000}
	_, _, err := f.s.Commit(f.ctx, second)
	wantErr(t, "create beyond the checkpoint quota", err, ledger.ErrStorageQuotaExceeded)
	var qe *ledger.StorageQuotaError
	if !errors.As(err, &qe) || qe.HeldGiB != 600 || qe.WantGiB != 500 || qe.QuotaGiB != 1000 {
		t.Fatalf("StorageQuotaError = %+v, want 600 held + 500 > 1000", qe)
	}
	f.wantNothingFrom(second)
	f.wantState(second.ConfirmationRef, ledger.ConfirmationAvailable, "")

	// exactly what is left fits; without a known quota nothing is checked
	// (another booking: the checker holds a booking's runs to each quota)
	fits := f.create("acct_42", "bk_ckq", "fits", 8, 64)
	fits.Plan = ledger.RunPlan{IntervalSteps: 100, Steps: 1000, CheckpointGiB: 400, StorageQuotaGiB: 1000}
	f.commit(fits)
	unknown := f.create("acct_42", "bk_ckq_none", "unknown", 8, 64)
	unknown.Plan = ledger.RunPlan{IntervalSteps: 100, Steps: 1000, CheckpointGiB: 5000}
	f.commit(unknown)

	// a cancelled run frees its share
	at := fits.CreatedAt.Add(time.Minute)
	f.commit(f.lifecycle("acct_42", "train.cancel", "bk_ckq", first.RunID, "cancel-first", at))
	again := f.create("acct_42", "bk_ckq", "again", 8, 64)
	again.CreatedAt, again.LiveUntil = at.Add(time.Second), at.Add(time.Hour)
	again.Plan = ledger.RunPlan{IntervalSteps: 100, Steps: 1000, CheckpointGiB: 600, StorageQuotaGiB: 6000}
	f.commit(again)
}

// testCapacity: runs share their booking's GPUs; a create beyond them is
// refused naming the live runs, nothing written; cleanup, cancel and the
// declared end free GPUs.
func testCapacity(t *testing.T, f *fixture) {
	first := f.create("acct_42", "bk_cap", "first", 48, 64)
	f.commit(first)
	other := f.create("acct_42", "bk_cap", "other", 8, 64)
	f.commit(other)

	over := f.create("acct_42", "bk_cap", "over", 16, 64)
	_, _, err := f.s.Commit(f.ctx, over)
	wantErr(t, "create beyond the booking", err, ledger.ErrCapacityExceeded)
	var ce *ledger.CapacityError
	if !errors.As(err, &ce) || ce.HeldGPUs != 56 || ce.WantGPUs != 16 || ce.BookedGPUs != 64 ||
		len(ce.Runs) != 2 || !sameIDs(ce.Runs, first.RunID, other.RunID) {
		t.Fatalf("CapacityError = %+v, want 56 held + 16 > 64 naming %s and %s", ce, first.RunID, other.RunID)
	}
	f.wantNothingFrom(over)
	f.wantState(over.ConfirmationRef, ledger.ConfirmationAvailable, "")

	// A create that decided before the stored runs were admitted (its
	// decision time is earlier) still finds them holding their GPUs.
	early := f.create("acct_42", "bk_cap", "early", 16, 64)
	early.CreatedAt, early.LiveUntil = first.CreatedAt.Add(-time.Second), first.CreatedAt.Add(time.Hour)
	_, _, err = f.s.Commit(f.ctx, early)
	wantErr(t, "create that decided earlier", err, ledger.ErrCapacityExceeded)
	f.wantNothingFrom(early)

	// Exactly what is left fits.
	fits := f.create("acct_42", "bk_cap", "fits", 8, 64)
	f.commit(fits)
	f.wantHeld("bk_cap", fits.CreatedAt, 64)

	// Cleanup of the first run frees its 48 GPUs for the refused one.
	at := first.CreatedAt.Add(time.Minute)
	f.commit(f.lifecycle("acct_42", "train.cleanup", "bk_cap", first.RunID, "cleanup", at))
	f.wantHeld("bk_cap", at, 16)
	later := over
	later.CreatedAt, later.LiveUntil = at.Add(time.Second), at.Add(time.Hour)
	f.commit(later)
	f.wantHeld("bk_cap", later.CreatedAt, 32)

	// After every run's declared end the booking holds nothing.
	f.wantHeld("bk_cap", at.Add(7*time.Hour), 0)
	after := f.create("acct_42", "bk_cap", "after-end", 64, 64)
	after.CreatedAt, after.LiveUntil = at.Add(7*time.Hour), at.Add(8*time.Hour)
	f.commit(after)
}

// testBookingRelease: a release ends the booking's live runs and no run is
// admitted on it afterwards.
func testBookingRelease(t *testing.T, f *fixture) {
	a := f.create("acct_42", "bk_rel", "create", 8, 64)
	f.commit(a)
	at := a.CreatedAt.Add(time.Minute)
	f.commit(f.lifecycle("acct_42", "booking.release", "bk_rel", "", "release", at))
	r := f.wantRun(a.RunID, false, at)
	if r.EndedBy != "booking.release" {
		t.Fatalf("run after release: %+v", r)
	}
	u, err := f.s.BookingUsage(f.ctx, "bk_rel", at)
	if err != nil || !u.Released.Equal(at) || u.HeldGPUs != 0 {
		t.Fatalf("BookingUsage after release = %+v, %v", u, err)
	}
	b := f.create("acct_42", "bk_rel", "after", 8, 64)
	b.CreatedAt, b.LiveUntil = at.Add(time.Second), at.Add(time.Hour)
	_, _, err = f.s.Commit(f.ctx, b)
	wantErr(t, "create on a released booking", err, ledger.ErrBookingReleased)
	f.wantNothingFrom(b)
	// Also one that decided before the release was stored.
	c := f.create("acct_42", "bk_rel", "decided-before", 8, 64)
	c.CreatedAt, c.LiveUntil = at.Add(-time.Second), at.Add(time.Hour)
	_, _, err = f.s.Commit(f.ctx, c)
	wantErr(t, "create that decided before the release", err, ledger.ErrBookingReleased)
	f.wantNothingFrom(c)
}

// testBindings: whatever the policy decided, a confirmation is consumed only
// by the admission it was issued for; every mismatch writes nothing.
func testBindings(t *testing.T, f *fixture) {
	create := f.create("acct_42", "bk_bind", "run", 8, 64)
	f.commit(create)
	for name, tc := range map[string]struct {
		action api.Action
		mutate func(a *ledger.Admission)
		want   error
	}{
		"other booking":  {"train.create", func(a *ledger.Admission) { a.BookingID = "bk_other" }, ledger.ErrConfirmationMismatch},
		"other manifest": {"train.create", func(a *ledger.Admission) { a.ManifestDigest = digest("other") }, ledger.ErrConfirmationMismatch},
		"cost above":     {"train.create", func(a *ledger.Admission) { a.CostMicroUSD = 5_000_000_001 }, ledger.ErrCostExceeded},
		"other run":      {"train.cancel", func(a *ledger.Admission) { a.RunID = ledger.NewRunID() }, ledger.ErrConfirmationMismatch},
		"other account":  {"train.cleanup", func(a *ledger.Admission) { a.Account = "acct_43" }, ledger.ErrConfirmationMismatch},
	} {
		c := f.confirmation("acct_42", tc.action)
		c.BookingID = "bk_bind"
		if tc.action != "train.create" {
			c.RunID = create.RunID
		}
		if err := f.s.DepositConfirmation(f.ctx, c); err != nil {
			t.Fatal(err)
		}
		a := admission(c, "key-"+name, "req-"+name)
		a.BookingID = "bk_bind"
		tc.mutate(&a)
		_, _, err := f.s.Commit(f.ctx, a)
		wantErr(t, name, err, tc.want)
		f.wantNoAdmission(a.Account, a.IdempotencyKey)
		if tc.action == "train.create" {
			f.wantNoRun(a.RunID)
		}
		f.wantState(c.Ref, ledger.ConfirmationAvailable, "")
	}
	// The cost exactly at the confirmed cost is fine.
	c := f.confirmation("acct_42", "train.create")
	c.BookingID = "bk_bind"
	if err := f.s.DepositConfirmation(f.ctx, c); err != nil {
		t.Fatal(err)
	}
	a := admission(c, "exact", "req-exact")
	a.BookingID, a.CostMicroUSD = "bk_bind", c.CostMicroUSD
	f.commit(a)
	f.wantRun(create.RunID, true, a.CreatedAt)
}

// testRevocations: Revoke is idempotent and kept; Commit refuses an
// admission resting on any revoked confirmation, entitlement, booking or
// caller key, writing nothing; Sweep drops revocations past their expiry.
func testRevocations(t *testing.T, f *fixture) {
	for _, kind := range []ledger.RevocationKind{ledger.RevokeConfirmation, ledger.RevokeEntitlement,
		ledger.RevokeBooking, ledger.RevokeCallerKey} {
		a := f.create("acct_42", "bk_rev_"+string(kind), "k-"+string(kind), 1, 8)
		c, _ := f.s.Confirmation(f.ctx, a.ConfirmationRef)
		a.EntitlementJTI, a.CallerKeyID = "ent-"+string(kind), "kid-"+string(kind)
		subject := map[ledger.RevocationKind]string{
			ledger.RevokeConfirmation: c.JTI, ledger.RevokeEntitlement: a.EntitlementJTI,
			ledger.RevokeBooking: a.BookingID, ledger.RevokeCallerKey: a.CallerKeyID,
		}[kind]
		r := ledger.Revocation{Kind: kind, Subject: subject, Reason: "test", RevokedBy: "revoker-1",
			RevokedAt: base, ExpiresAt: base.Add(time.Hour)}
		stored, created, err := f.s.Revoke(f.ctx, r)
		if err != nil || !created || stored.Subject != subject || !stored.ExpiresAt.Equal(r.ExpiresAt) {
			t.Fatalf("Revoke(%s) = %+v, %v, %v", kind, stored, created, err)
		}
		again := r
		again.Reason, again.RevokedAt = "again", base.Add(time.Minute)
		stored, created, err = f.s.Revoke(f.ctx, again)
		if err != nil || created || stored.Reason != "test" || !stored.RevokedAt.Equal(base) {
			t.Fatalf("Revoke(%s) again = %+v, %v, %v; want the first, unchanged", kind, stored, created, err)
		}
		got, err := f.s.Revoked(f.ctx, kind, subject)
		if err != nil || got.RevokedBy != "revoker-1" {
			t.Fatalf("Revoked(%s) = %+v, %v", kind, got, err)
		}
		_, _, err = f.s.Commit(f.ctx, a)
		var re *ledger.RevocationError
		if !errors.As(err, &re) || re.Revocation.Kind != kind || !errors.Is(err, ledger.ErrRevoked) {
			t.Fatalf("Commit resting on a revoked %s = %v, want RevocationError", kind, err)
		}
		f.wantNothingFrom(a)
		f.wantState(a.ConfirmationRef, ledger.ConfirmationAvailable, "")
	}
	if _, err := f.s.Revoked(f.ctx, ledger.RevokeBooking, "bk_never"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Revoked(unknown) = %v, want ErrNotFound", err)
	}
	if _, _, err := f.s.Revoke(f.ctx, ledger.Revocation{Kind: "jwt", Subject: "x", RevokedBy: "r",
		RevokedAt: base, ExpiresAt: base}); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("Revoke(bad kind) = %v, want ErrInvalid", err)
	}
	if _, err := f.s.Sweep(f.ctx, base.Add(2*time.Hour), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Revoked(f.ctx, ledger.RevokeBooking, "bk_rev_booking"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Revoked after its expiry and a sweep = %v, want ErrNotFound", err)
	}
}

// CapacityRace races n train.create admissions, each for every GPU of one
// booking, each with its own confirmation and key, spread over stores
// (several processes or replicas sharing one ledger). Exactly one must be
// allowed; every other is refused with ErrCapacityExceeded naming the
// winner, and wrote nothing. It returns the number of allows.
func CapacityRace(t *testing.T, stores []ledger.Store, booking string, n int) int {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	attempts := make([]ledger.Admission, n)
	for i := range attempts {
		attempts[i] = f.create("acct_42", booking, fmt.Sprintf("%s-full-%d", booking, i), 64, 64)
	}
	errs := make([]error, n)
	race(n, func(i int) {
		_, _, errs[i] = stores[i%len(stores)].Commit(t.Context(), attempts[i])
	})
	allows, winner := 0, -1
	for i, err := range errs {
		if err == nil {
			allows++
			winner = i
		}
	}
	if allows != 1 {
		t.Fatalf("%d concurrent full-booking creates: %d allowed, want exactly 1 (errors %v)", n, allows, errs)
	}
	for i, err := range errs {
		if i == winner {
			continue
		}
		var ce *ledger.CapacityError
		if !errors.As(err, &ce) || len(ce.Runs) != 1 || ce.Runs[0].RunID != attempts[winner].RunID {
			t.Fatalf("loser %d: %v, want a CapacityError naming %s", i, err, attempts[winner].RunID)
		}
		f.wantNothingFrom(attempts[i])
		f.wantState(attempts[i].ConfirmationRef, ledger.ConfirmationAvailable, "")
	}
	f.wantHeld(booking, attempts[winner].CreatedAt, 64)
	return allows
}

func testCapacityRaces(t *testing.T, f *fixture) {
	for _, n := range []int{2, 10, 50} {
		CapacityRace(t, []ledger.Store{f.s}, fmt.Sprintf("bk_race_%d", n), n)
	}
}

// sameIDs reports whether runs are the runs ids, in any order.
func sameIDs(runs []ledger.RunRecord, ids ...string) bool {
	if len(runs) != len(ids) {
		return false
	}
	for _, id := range ids {
		if !slices.ContainsFunc(runs, func(r ledger.RunRecord) bool { return r.RunID == id }) {
			return false
		}
	}
	return true
}
