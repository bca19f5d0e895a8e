// Package ledgertest is the conformance suite every ledger.Store
// implementation must pass (docs/architecture.md §3). An implementation's test calls Run
// with a function that opens a fresh store:
//
//	func TestConformance(t *testing.T) {
//		ledgertest.Run(t, func(t *testing.T) ledger.Store {
//			s, err := bolt.Open(filepath.Join(t.TempDir(), "ledger.db"), bolt.Options{})
//			if err != nil {
//				t.Fatal(err)
//			}
//			return s
//		})
//	}
//
// Each case asserts the exact outcome and, through the Store's own reads,
// what was and was not written.
package ledgertest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// Run runs every conformance case as a parallel subtest. open must return a
// fresh, empty store each time it is called (cases run at the same time, so
// stores must not share state); Run closes it when the subtest ends. Times
// in the suite are whole microseconds, the precision every backend keeps,
// except where a case says otherwise.
func Run(t *testing.T, open func(t *testing.T) ledger.Store) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, &fixture{t: t, s: s, ctx: t.Context()})
			// Whatever the case did, a store that can check itself must
			// find every cross-record invariant intact.
			if c, ok := s.(ledger.Checker); ok && !t.Failed() && tc.name != "ClosedStore" {
				if rep, err := c.Check(t.Context()); err != nil {
					t.Fatalf("Check after the case: %v (%+v)", err, rep)
				}
			}
		})
	}
}

var cases = []struct {
	name string
	fn   func(t *testing.T, f *fixture)
}{
	{"DepositAndGet", testDepositAndGet},
	{"DepositDuplicate", testDepositDuplicate},
	{"DepositInvalid", testDepositInvalid},
	{"CommitConsumesAndWrites", testCommitConsumesAndWrites},
	{"CommitNonCreateKeepsRunIndex", testCommitNonCreateKeepsRunIndex},
	{"ReplaySameDigest", testReplaySameDigest},
	{"KeyConflict", testKeyConflict},
	{"ConsumedConfirmationNewKey", testConsumedConfirmationNewKey},
	{"UnknownRef", testUnknownRef},
	{"ConfirmationMismatch", testConfirmationMismatch},
	{"CommitInvalid", testCommitInvalid},
	{"KeysScopedByAccount", testKeysScopedByAccount},
	{"SweepKeepsTombstones", testSweepKeepsTombstones},
	{"SweepManyTokens", testSweepManyTokens},
	{"ConcurrentCommitsOneConfirmation", testConcurrentOneConfirmation},
	{"ConcurrentCommitsSameKey", testConcurrentSameKey},
	{"ConcurrentSameKeyOtherConfirmations", testConcurrentSameKeyOtherConfirmations},
	{"ConcurrentKeyConflicts", testConcurrentKeyConflicts},
	{"ConcurrentDepositsOneJTI", testConcurrentDepositsOneJTI},
	{"ConcurrentSweepAndCommit", testConcurrentSweepAndCommit},
	{"RunIDReused", testRunIDReused},
	{"StageAdvance", testStageAdvance},
	{"StageAdvanceUnknownRun", testStageAdvanceUnknownRun},
	{"RestartRecordsStep", testRestartRecordsStep},
	{"EndedRunNeitherAdvancesNorRestarts", testEndedRunNeitherAdvancesNorRestarts},
	{"ConcurrentStageAdvances", testConcurrentStageAdvances},
	{"CommitTimePrecision", testCommitTimePrecision},
	{"LongAndUnicodeIDs", testLongAndUnicodeIDs},
	{"RunRecordLife", testRunRecordLife},
	{"Capacity", testCapacity},
	{"CheckpointQuota", testCheckpointQuota},
	{"CapacityRaces", testCapacityRaces},
	{"BookingRelease", testBookingRelease},
	{"BookingHistory", testBookingHistory},
	{"EndedRunsStayEnded", testEndedRunsStayEnded},
	{"FirstEndStays", testFirstEndStays},
	{"Bindings", testBindings},
	{"Revocations", testRevocations},
	{"ClosedStore", testClosedStore},
	{"CancelledContext", testCancelledContext},
	{"RunStateTransitions", testRunStateTransitions},
	{"RevokedBookingRevokesRuns", testRevokedBookingRevokesRuns},
	{"RevokedEntitlementRevokesItsRuns", testRevokedEntitlementRevokesItsRuns},
	{"HaltRun", testHaltRun},
	{"BookingBoundToOneAccount", testBookingBoundToOneAccount},
	{"RaceRevokeRestart", testRaceRevokeRestart},
	{"RaceHaltRestart", testRaceHaltRestart},
	{"RaceRevokeCreate", testRaceRevokeCreate},
	{"RaceHaltAdvance", testRaceHaltAdvance},
	{"RunLifeHistory", testRunLifeHistory},
	{"RestartWithinPlan", testRestartWithinPlan},
	{"RestartBudget", testRestartBudget},
	{"RaceRestartBudget", testRaceRestartBudget},
	{"ListRuns", testListRuns},
	{"WorkloadBindsOnce", testWorkloadBindsOnce},
	{"WorkloadChildren", testWorkloadChildren},
	{"WorkloadConcurrentRoots", testWorkloadConcurrentRoots},
	{"WorkloadInvalid", testWorkloadInvalid},
	{"JobBindsOnce", testJobBindsOnce},
	{"JobRunState", testJobRunState},
	{"JobInvalid", testJobInvalid},
	{"RaceJobBind", testRaceJobBind},
	{"OneSinkPerRun", testOneSinkPerRun},
	{"RaceJobWorkloadBind", testRaceJobWorkloadBind},
	{"WorkloadActiveRoot", testWorkloadActiveRoot},
	{"WorkloadGeneratedName", testWorkloadGeneratedName},
	{"WorkloadRunStateInBind", testWorkloadRunStateInBind},
	{"WorkloadCharges", testWorkloadCharges},
	{"RaceWorkloadCharges", testRaceWorkloadCharges},
	{"ReportDeadline", testReportDeadline},
	{"RecordReport", testRecordReport},
	{"DirectHalt", testDirectHalt},
	{"RaceReportRestart", testRaceReportRestart},
	{"RaceHaltReport", testRaceHaltReport},
	{"StageGrow", testStageGrow},
	{"StageGrowRefused", testStageGrowRefused},
	{"RaceGrowCreate", testRaceGrowCreate},
}

// base is the suite's "now"; confirmations expire 15 minutes after it.
var base = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

const ttl = 15 * time.Minute

type fixture struct {
	t   *testing.T
	s   ledger.Store
	ctx context.Context
	seq atomic.Int64
}

// confirmation returns a valid, not yet deposited confirmation for account.
func (f *fixture) confirmation(account string, action api.Action) ledger.Confirmation {
	n := f.seq.Add(1)
	c := ledger.Confirmation{
		Ref:         ledger.NewConfirmationRef(),
		JTI:         fmt.Sprintf("jti-%d-%s", n, ledger.NewConfirmationRef()[4:12]),
		Account:     account,
		Action:      action,
		Token:       []byte(fmt.Sprintf("eyJhbGciOiJFZERTQSJ9.eyJuIjo%d.c2ln", n)),
		ExpiresAt:   base.Add(ttl),
		DepositedAt: base.Add(-time.Minute).Add(1234 * time.Microsecond),
	}
	c.BookingID, c.CostMicroUSD = "bk_01", 5_000_000_000
	switch action {
	case "train.create":
		c.ManifestDigest = digest("manifest")
	case "train.cancel", "train.cleanup":
		c.RunID = ledger.NewRunID()
	}
	return c
}

// depositFor deposits a cancel or cleanup confirmation bound to runID.
func (f *fixture) depositFor(account string, action api.Action, runID string) ledger.Confirmation {
	f.t.Helper()
	c := f.confirmation(account, action)
	c.RunID = runID
	if err := f.s.DepositConfirmation(f.ctx, c); err != nil {
		f.t.Fatalf("DepositConfirmation: %v", err)
	}
	c.State = ledger.ConfirmationAvailable
	return c
}

// deposit deposits a fresh confirmation and returns it as stored.
func (f *fixture) deposit(account string, action api.Action) ledger.Confirmation {
	f.t.Helper()
	c := f.confirmation(account, action)
	if err := f.s.DepositConfirmation(f.ctx, c); err != nil {
		f.t.Fatalf("DepositConfirmation: %v", err)
	}
	c.State = ledger.ConfirmationAvailable
	return c
}

// admission returns a train.create admission consuming c under key; request
// names the request, from which the digest is derived.
func admission(c ledger.Confirmation, key, request string) ledger.Admission {
	a := ledger.Admission{
		Account:         c.Account,
		IdempotencyKey:  key,
		RequestDigest:   digest(request),
		DecisionID:      "dec_" + ledger.NewConfirmationRef()[4:],
		RunID:           ledger.NewRunID(),
		Action:          c.Action,
		BookingID:       c.BookingID,
		ManifestDigest:  digest("manifest"),
		ConfirmationRef: c.Ref,
		ConfirmationJTI: c.JTI,
		BundleRevision:  "rev-7",
		State:           api.StateAdmitted,
		CreatedAt:       base.Add(2*time.Second + 5678*time.Microsecond),
		EntitlementJTI:  "ent-jti-1",
		CallerKeyID:     "caller-key-1",
	}
	switch c.Action {
	case "train.create":
		// One GPU of a booking far larger than any case fills; the
		// capacity cases use their own bookings.
		a.GPUs, a.BookedGPUs, a.LiveUntil = 1, 1<<20, a.CreatedAt.Add(6*time.Hour)
		a.CostMicroUSD = 1_000_000_000
		// The admission ticket is stored with the admission and read back
		// byte for byte (any compact-JWS-shaped string will do here).
		a.Ticket = "eyJhbGciOiJFZERTQSIsInR5cCI6Iml0by10aWNrZXQrand0In0.eyJqdGkiOiIx" + digest(key)[7:] + "." + strings.Repeat("A", 86)
	case "train.cancel":
		a.State, a.RunID = api.StateCancelAdmitted, c.RunID
	case "train.cleanup":
		a.State, a.RunID = api.StateCleanupAdmitted, c.RunID
	case "booking.release":
		a.State, a.RunID = api.StateReleaseAdmitted, ""
	case "train.restart":
		a.State = api.StateRestartAdmitted
	}
	return a
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (f *fixture) commit(a ledger.Admission) ledger.Admission {
	f.t.Helper()
	stored, replayed, err := f.s.Commit(f.ctx, a)
	if err != nil || replayed {
		f.t.Fatalf("Commit = replayed %v, %v; want a fresh commit", replayed, err)
	}
	return stored
}

func (f *fixture) wantConfirmation(ref string, want ledger.Confirmation) {
	f.t.Helper()
	got, err := f.s.Confirmation(f.ctx, ref)
	if err != nil {
		f.t.Fatalf("Confirmation: %v", err)
	}
	if !equal(got, want) {
		f.t.Fatalf("Confirmation =\n %+v\nwant\n %+v", got, want)
	}
}

func (f *fixture) wantState(ref string, state ledger.ConfirmationState, consumedBy string) {
	f.t.Helper()
	got, err := f.s.Confirmation(f.ctx, ref)
	if err != nil {
		f.t.Fatalf("Confirmation: %v", err)
	}
	if got.State != state || got.ConsumedBy != consumedBy {
		f.t.Fatalf("Confirmation state = %q consumed by %q, want %q by %q", got.State, got.ConsumedBy, state, consumedBy)
	}
}

func (f *fixture) wantAdmission(account, key string, want ledger.Admission) {
	f.t.Helper()
	got, err := f.s.Admission(f.ctx, account, key)
	if err != nil {
		f.t.Fatalf("Admission(%q, %q): %v", account, key, err)
	}
	if !equal(got, want) {
		f.t.Fatalf("Admission =\n %+v\nwant\n %+v", got, want)
	}
}

func (f *fixture) wantNoAdmission(account, key string) {
	f.t.Helper()
	if got, err := f.s.Admission(f.ctx, account, key); !errors.Is(err, ledger.ErrNotFound) {
		f.t.Fatalf("Admission(%q, %q) = %+v, %v; want ErrNotFound", account, key, got, err)
	}
}

func (f *fixture) wantNoRun(runID string) {
	f.t.Helper()
	if got, err := f.s.Run(f.ctx, runID); !errors.Is(err, ledger.ErrNotFound) {
		f.t.Fatalf("Run(%q) = %+v, %v; want ErrNotFound", runID, got, err)
	}
}

// wantNothingFrom asserts that a failed Commit of a left no trace.
func (f *fixture) wantNothingFrom(a ledger.Admission) {
	f.t.Helper()
	f.wantNoAdmission(a.Account, a.IdempotencyKey)
	if a.RunID != "" {
		f.wantNoRun(a.RunID)
	}
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
}

// equal compares records, times by instant, so a backend may return any
// location.
func equal[T ledger.Confirmation | ledger.Admission](a, b T) bool {
	return reflect.DeepEqual(normalize(a), normalize(b))
}

func normalize[T ledger.Confirmation | ledger.Admission](v T) T {
	switch x := any(&v).(type) {
	case *ledger.Confirmation:
		x.ExpiresAt, x.DepositedAt, x.ConsumedAt = x.ExpiresAt.UTC(), x.DepositedAt.UTC(), x.ConsumedAt.UTC()
		if len(x.Token) == 0 {
			x.Token = nil
		}
	case *ledger.Admission:
		x.CreatedAt = x.CreatedAt.UTC()
		x.ReportDue = time.Time{} // inputs of the commit, never stored
		x.StageGPUs = 0
		if !x.LiveUntil.IsZero() {
			x.LiveUntil = x.LiveUntil.UTC()
		}
	}
	return v
}

func testDepositAndGet(t *testing.T, f *fixture) {
	if err := f.s.Ping(f.ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	c := f.confirmation("acct_42", "train.create")
	if err := f.s.DepositConfirmation(f.ctx, c); err != nil {
		t.Fatalf("DepositConfirmation: %v", err)
	}
	want := c
	want.State = ledger.ConfirmationAvailable
	f.wantConfirmation(c.Ref, want)

	// An explicit available state is accepted too.
	c2 := f.confirmation("acct_42", "train.create")
	c2.State = ledger.ConfirmationAvailable
	if err := f.s.DepositConfirmation(f.ctx, c2); err != nil {
		t.Fatalf("DepositConfirmation(state available): %v", err)
	}
	f.wantConfirmation(c2.Ref, c2)

	_, err := f.s.Confirmation(f.ctx, ledger.NewConfirmationRef())
	wantErr(t, "Confirmation(unknown)", err, ledger.ErrNotFound)
	f.wantNoAdmission("acct_42", "k1")
	f.wantNoRun(ledger.NewRunID())
}

func testDepositDuplicate(t *testing.T, f *fixture) {
	c := f.deposit("acct_42", "train.create")

	sameRef := f.confirmation("acct_42", "train.create")
	sameRef.Ref = c.Ref
	wantErr(t, "deposit same ref", f.s.DepositConfirmation(f.ctx, sameRef), ledger.ErrConfirmationDuplicate)

	sameJTI := f.confirmation("acct_42", "train.create")
	sameJTI.JTI = c.JTI
	wantErr(t, "deposit same jti", f.s.DepositConfirmation(f.ctx, sameJTI), ledger.ErrConfirmationDuplicate)
	if _, err := f.s.Confirmation(f.ctx, sameJTI.Ref); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("refused deposit was written: Confirmation = %v, want ErrNotFound", err)
	}
	// The refused deposits' other half (sameRef's jti) is still free.
	fresh := f.confirmation("acct_42", "train.create")
	fresh.JTI = sameRef.JTI
	if err := f.s.DepositConfirmation(f.ctx, fresh); err != nil {
		t.Fatalf("refused deposit reserved its jti: %v", err)
	}
	f.wantConfirmation(c.Ref, c)
}

func testDepositInvalid(t *testing.T, f *fixture) {
	for name, mutate := range map[string]func(c *ledger.Confirmation){
		"bad ref":        func(c *ledger.Confirmation) { c.Ref = "cfr_XYZ" },
		"upper hex ref":  func(c *ledger.Confirmation) { c.Ref = "cfr_" + strings.ToUpper(c.Ref[4:]) },
		"empty jti":      func(c *ledger.Confirmation) { c.JTI = "" },
		"long jti":       func(c *ledger.Confirmation) { c.JTI = strings.Repeat("j", ledger.MaxIDLen+1) },
		"empty account":  func(c *ledger.Confirmation) { c.Account = "" },
		"NUL in account": func(c *ledger.Confirmation) { c.Account = "acct\x00x" },
		"empty action":   func(c *ledger.Confirmation) { c.Action = "" },
		"empty token":    func(c *ledger.Confirmation) { c.Token = nil },
		"zero exp":       func(c *ledger.Confirmation) { c.ExpiresAt = time.Time{} },
		"zero deposited": func(c *ledger.Confirmation) { c.DepositedAt = time.Time{} },
		"consumed state": func(c *ledger.Confirmation) { c.State = ledger.ConfirmationConsumed },
		"consumed by":    func(c *ledger.Confirmation) { c.ConsumedBy = "k" },
	} {
		c := f.confirmation("acct_42", "train.create")
		mutate(&c)
		wantErr(t, name, f.s.DepositConfirmation(f.ctx, c), ledger.ErrInvalid)
		if ledger.IsConfirmationRef(c.Ref) {
			if _, err := f.s.Confirmation(f.ctx, c.Ref); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("%s: invalid deposit was written: %v", name, err)
			}
		}
	}
}

func testCommitConsumesAndWrites(t *testing.T, f *fixture) {
	c := f.deposit("acct_42", "train.create")
	a := admission(c, "key-1", "req-1")
	stored, replayed, err := f.s.Commit(f.ctx, a)
	if err != nil || replayed {
		t.Fatalf("Commit = replayed %v, %v; want fresh", replayed, err)
	}
	if !equal(stored, a) {
		t.Fatalf("Commit stored =\n %+v\nwant\n %+v", stored, a)
	}
	want := c
	want.State, want.ConsumedBy, want.ConsumedAt = ledger.ConfirmationConsumed, "key-1", a.CreatedAt
	f.wantConfirmation(c.Ref, want)
	f.wantAdmission("acct_42", "key-1", a)
	run, err := f.s.Run(f.ctx, a.RunID)
	if err != nil || !equal(run, a) {
		t.Fatalf("Run = %+v, %v; want %+v", run, err, a)
	}
}

func testCommitNonCreateKeepsRunIndex(t *testing.T, f *fixture) {
	create := f.commit(admission(f.deposit("acct_42", "train.create"), "create", "req-create"))

	for _, action := range []string{"train.cancel", "train.cleanup"} {
		a := admission(f.depositFor("acct_42", api.Action(action), create.RunID), action, "req-"+action)
		f.commit(a)
		f.wantAdmission("acct_42", action, a)
	}
	rel := admission(f.deposit("acct_42", "booking.release"), "release", "req-release")
	f.commit(rel)
	f.wantAdmission("acct_42", "release", rel)

	// Run still answers with the admission that created the run.
	run, err := f.s.Run(f.ctx, create.RunID)
	if err != nil || !equal(run, create) {
		t.Fatalf("Run = %+v, %v; want the train.create admission %+v", run, err, create)
	}
}

func testReplaySameDigest(t *testing.T, f *fixture) {
	c := f.deposit("acct_42", "train.create")
	first := f.commit(admission(c, "key-1", "req-1"))

	// A retry of the same request: the server mints a new decision and run
	// id, and here even names a second, available confirmation. None of it
	// may be used: the stored admission comes back and nothing is consumed.
	other := f.deposit("acct_42", "train.create")
	retry := admission(c, "key-1", "req-1")
	retry.ConfirmationRef, retry.ConfirmationJTI = other.Ref, other.JTI
	for range 3 {
		stored, replayed, err := f.s.Commit(f.ctx, retry)
		if err != nil || !replayed {
			t.Fatalf("Commit replay = replayed %v, %v; want replayed", replayed, err)
		}
		if !equal(stored, first) {
			t.Fatalf("replay stored =\n %+v\nwant the first admission\n %+v", stored, first)
		}
	}
	f.wantConfirmation(other.Ref, other)
	f.wantState(c.Ref, ledger.ConfirmationConsumed, "key-1")
	f.wantAdmission("acct_42", "key-1", first)
	f.wantNoRun(retry.RunID)
}

func testKeyConflict(t *testing.T, f *fixture) {
	c1 := f.deposit("acct_42", "train.create")
	first := f.commit(admission(c1, "key-1", "req-1"))

	c2 := f.deposit("acct_42", "train.create")
	a := admission(c2, "key-1", "req-2")
	_, _, err := f.s.Commit(f.ctx, a)
	wantErr(t, "Commit same key, other digest", err, ledger.ErrKeyConflict)

	f.wantConfirmation(c2.Ref, c2)
	f.wantAdmission("acct_42", "key-1", first)
	f.wantNoRun(a.RunID)

	// The conflict is checked before the confirmation: reusing the key with
	// a consumed confirmation is still a conflict, not a replay of c1.
	again := admission(c1, "key-1", "req-3")
	_, _, err = f.s.Commit(f.ctx, again)
	wantErr(t, "Commit same key, other digest, consumed confirmation", err, ledger.ErrKeyConflict)
}

func testConsumedConfirmationNewKey(t *testing.T, f *fixture) {
	c := f.deposit("acct_42", "train.create")
	f.commit(admission(c, "key-1", "req-1"))

	for _, key := range []string{"key-2", "key-3"} {
		a := admission(c, key, "req-"+key)
		_, replayed, err := f.s.Commit(f.ctx, a)
		wantErr(t, "Commit consumed confirmation", err, ledger.ErrConfirmationConsumed)
		if replayed {
			t.Fatal("failed Commit reported replayed")
		}
		f.wantNothingFrom(a)
	}
	f.wantState(c.Ref, ledger.ConfirmationConsumed, "key-1")
}

func testUnknownRef(t *testing.T, f *fixture) {
	known := f.deposit("acct_42", "train.create")
	c := f.confirmation("acct_42", "train.create") // never deposited
	a := admission(c, "key-1", "req-1")
	_, _, err := f.s.Commit(f.ctx, a)
	wantErr(t, "Commit unknown ref", err, ledger.ErrNotFound)
	f.wantNothingFrom(a)
	if _, err := f.s.Confirmation(f.ctx, c.Ref); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Confirmation(unknown) = %v, want ErrNotFound", err)
	}
	f.wantConfirmation(known.Ref, known)
}

func testConfirmationMismatch(t *testing.T, f *fixture) {
	c := f.deposit("acct_42", "train.create")
	for name, mutate := range map[string]func(a *ledger.Admission){
		"other account": func(a *ledger.Admission) { a.Account = "acct_43" },
		"other action": func(a *ledger.Admission) {
			a.Action, a.State = "train.cancel", api.StateCancelAdmitted
			a.GPUs, a.BookedGPUs, a.LiveUntil = 0, 0, time.Time{}
		},
		"other jti": func(a *ledger.Admission) { a.ConfirmationJTI = "jti-other" },
	} {
		a := admission(c, "key-"+name, "req-"+name)
		mutate(&a)
		_, _, err := f.s.Commit(f.ctx, a)
		wantErr(t, name, err, ledger.ErrConfirmationMismatch)
		f.wantNothingFrom(a)
	}
	f.wantConfirmation(c.Ref, c)
}

func testCommitInvalid(t *testing.T, f *fixture) {
	c := f.deposit("acct_42", "train.create")
	for name, mutate := range map[string]func(a *ledger.Admission){
		"empty account":          func(a *ledger.Admission) { a.Account = "" },
		"NUL in account":         func(a *ledger.Admission) { a.Account = "acct_42\x00" },
		"NUL in key":             func(a *ledger.Admission) { a.IdempotencyKey = "\x00key" },
		"empty key":              func(a *ledger.Admission) { a.IdempotencyKey = "" },
		"long key":               func(a *ledger.Admission) { a.IdempotencyKey = strings.Repeat("k", ledger.MaxIDLen+1) },
		"invalid UTF-8 key":      func(a *ledger.Admission) { a.IdempotencyKey = "k\xff" },
		"digest not sha256":      func(a *ledger.Admission) { a.RequestDigest = "md5:abc" },
		"digest upper hex":       func(a *ledger.Admission) { a.RequestDigest = strings.ToUpper(a.RequestDigest) },
		"bad confirmation ref":   func(a *ledger.Admission) { a.ConfirmationRef = "cfr_1" },
		"empty jti":              func(a *ledger.Admission) { a.ConfirmationJTI = "" },
		"unknown state":          func(a *ledger.Admission) { a.State = "allowed" },
		"bad run id":             func(a *ledger.Admission) { a.RunID = "run_1" },
		"zero created":           func(a *ledger.Admission) { a.CreatedAt = time.Time{} },
		"cancel without run":     func(a *ledger.Admission) { a.State, a.RunID = api.StateCancelAdmitted, "" },
		"GPUs past 2^31-1":       func(a *ledger.Admission) { a.GPUs = ledger.MaxGPUs + 1 },
		"booked past 2^31-1":     func(a *ledger.Admission) { a.BookedGPUs = 1 << 40 },
		"stage GPUs on a create": func(a *ledger.Admission) { a.StageGPUs = 8 },
		"negative stage GPUs":    func(a *ledger.Admission) { *a = advanceWith(*a, -1) },
		"stage GPUs past 2^31-1": func(a *ledger.Admission) { *a = advanceWith(*a, ledger.MaxGPUs+1) },
	} {
		a := admission(c, "key-1", "req-1")
		mutate(&a)
		_, _, err := f.s.Commit(f.ctx, a)
		wantErr(t, name, err, ledger.ErrInvalid)
	}
	f.wantConfirmation(c.Ref, c)
	f.wantNoAdmission("acct_42", "key-1")
}

// advanceWith is the create a turned into a valid stage advance of its
// run into a stage of stageGPUs.
func advanceWith(a ledger.Admission, stageGPUs int) ledger.Admission {
	a.Action, a.State, a.FromStage, a.Stage, a.StageGPUs = api.TrainStageAdvance, api.StateStageAdvanced, "pretrain", "sft", stageGPUs
	a.GPUs, a.BookedGPUs, a.LiveUntil, a.ManifestDigest, a.Ticket, a.CostMicroUSD = 0, 0, time.Time{}, "", "", 0
	return a
}

func testKeysScopedByAccount(t *testing.T, f *fixture) {
	// Each account on a booking of its own: a booking belongs to one.
	depositOn := func(account, booking string) ledger.Confirmation {
		c := f.confirmation(account, "train.create")
		c.BookingID = booking
		if err := f.s.DepositConfirmation(f.ctx, c); err != nil {
			t.Fatal(err)
		}
		c.State = ledger.ConfirmationAvailable
		return c
	}
	ca := depositOn("acct_a", "bk_a")
	cb := depositOn("acct_b", "bk_b")
	aa := f.commit(admission(ca, "same-key", "req-a"))
	ab := f.commit(admission(cb, "same-key", "req-b"))
	f.wantAdmission("acct_a", "same-key", aa)
	f.wantAdmission("acct_b", "same-key", ab)
	f.wantState(ca.Ref, ledger.ConfirmationConsumed, "same-key")
	f.wantState(cb.Ref, ledger.ConfirmationConsumed, "same-key")

	// Account and key are not concatenated ambiguously: ("acct_a", "x")
	// and ("acct_", "ax") are different slots.
	c1 := depositOn("acct_", "bk_c")
	f.commit(admission(c1, "asame-key", "req-c"))
	f.wantAdmission("acct_a", "same-key", aa)
}

func testSweepKeepsTombstones(t *testing.T, f *fixture) {
	consumed := f.deposit("acct_42", "train.create")
	admitted := f.commit(admission(consumed, "key-1", "req-1"))
	unused := f.deposit("acct_42", "train.create")
	later := f.confirmation("acct_42", "train.create")
	later.ExpiresAt = base.Add(time.Hour)
	if err := f.s.DepositConfirmation(f.ctx, later); err != nil {
		t.Fatal(err)
	}
	exp := base.Add(ttl)

	// Not yet past the leeway: nothing swept.
	n, err := f.s.Sweep(f.ctx, exp.Add(30*time.Second), time.Minute)
	if err != nil || n != 0 {
		t.Fatalf("Sweep within leeway = %d, %v; want 0, nil", n, err)
	}
	f.wantState(unused.Ref, ledger.ConfirmationAvailable, "")

	n, err = f.s.Sweep(f.ctx, exp.Add(2*time.Minute), time.Minute)
	if err != nil || n != 2 {
		t.Fatalf("Sweep = %d, %v; want 2, nil", n, err)
	}

	// The consumed one stays consumed, token gone.
	want := consumed
	want.Token, want.State, want.ConsumedBy, want.ConsumedAt = nil, ledger.ConfirmationConsumed, "key-1", admitted.CreatedAt
	f.wantConfirmation(consumed.Ref, want)
	a := admission(consumed, "key-2", "req-2")
	_, _, err = f.s.Commit(f.ctx, a)
	wantErr(t, "Commit swept consumed", err, ledger.ErrConfirmationConsumed)
	f.wantNothingFrom(a)

	// The unused one can never be consumed now.
	want = unused
	want.Token, want.State = nil, ledger.ConfirmationExpired
	f.wantConfirmation(unused.Ref, want)
	a = admission(unused, "key-3", "req-3")
	_, _, err = f.s.Commit(f.ctx, a)
	wantErr(t, "Commit swept unused", err, ledger.ErrConfirmationExpired)
	f.wantNothingFrom(a)

	// Neither jti nor reference can be deposited again.
	for _, old := range []ledger.Confirmation{consumed, unused} {
		again := f.confirmation("acct_42", "train.create")
		again.JTI = old.JTI
		wantErr(t, "re-deposit swept jti", f.s.DepositConfirmation(f.ctx, again), ledger.ErrConfirmationDuplicate)
		again = f.confirmation("acct_42", "train.create")
		again.Ref = old.Ref
		wantErr(t, "re-deposit swept ref", f.s.DepositConfirmation(f.ctx, again), ledger.ErrConfirmationDuplicate)
	}

	// The idempotent replay survives the sweep.
	stored, replayed, err := f.s.Commit(f.ctx, admission(consumed, "key-1", "req-1"))
	if err != nil || !replayed || !equal(stored, admitted) {
		t.Fatalf("replay after sweep = %+v, %v, %v; want the stored admission", stored, replayed, err)
	}

	// The unexpired one is untouched; sweeping again finds nothing.
	want = later
	want.State = ledger.ConfirmationAvailable
	f.wantConfirmation(later.Ref, want)
	if n, err := f.s.Sweep(f.ctx, exp.Add(2*time.Minute), time.Minute); err != nil || n != 0 {
		t.Fatalf("second Sweep = %d, %v; want 0, nil", n, err)
	}
	if _, err := f.s.Sweep(f.ctx, exp, -time.Second); !errors.Is(err, ledger.ErrInvalid) {
		t.Fatalf("Sweep(negative leeway) = %v, want ErrInvalid", err)
	}
}

// testSweepManyTokens sweeps more tokens than one transaction is likely to
// take, with the expiries out of deposit order.
func testSweepManyTokens(t *testing.T, f *fixture) {
	const n = 1100
	refs := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		c := f.confirmation("acct_42", "train.create")
		c.ExpiresAt = base.Add(time.Duration((i*7919)%n) * time.Second)
		refs[i] = c.Ref
		wg.Go(func() { errs <- f.s.DepositConfirmation(f.ctx, c) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("DepositConfirmation: %v", err)
		}
	}
	// Expiries are base+0s … base+1099s: sweep those before base+1000s.
	got, err := f.s.Sweep(f.ctx, base.Add(1000*time.Second), 0)
	if err != nil || got != 1000 {
		t.Fatalf("Sweep = %d, %v; want 1000, nil", got, err)
	}
	expired := 0
	for _, ref := range refs {
		c, err := f.s.Confirmation(f.ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		swept := c.ExpiresAt.Before(base.Add(1000 * time.Second))
		if swept != (c.State == ledger.ConfirmationExpired) || swept != (c.Token == nil) {
			t.Fatalf("confirmation expiring %v: state %q, token kept %v", c.ExpiresAt, c.State, c.Token != nil)
		}
		if swept {
			expired++
		}
	}
	if expired != 1000 {
		t.Fatalf("%d confirmations expired, want 1000", expired)
	}
}

func testConcurrentOneConfirmation(t *testing.T, f *fixture) {
	const n = 200
	c := f.deposit("acct_42", "train.create")
	attempts := make([]ledger.Admission, n)
	for i := range n {
		attempts[i] = admission(c, fmt.Sprintf("key-%03d", i), fmt.Sprintf("req-%03d", i))
	}
	errs := make([]error, n)
	race(n, func(i int) { _, _, errs[i] = f.s.Commit(f.ctx, attempts[i]) })
	winner := soleWinner(t, "Commit", errs, ledger.ErrConfirmationConsumed)
	f.wantState(c.Ref, ledger.ConfirmationConsumed, attempts[winner].IdempotencyKey)
	for i, a := range attempts {
		if i == winner {
			f.wantAdmission(a.Account, a.IdempotencyKey, a)
			continue
		}
		f.wantNothingFrom(a)
	}
}

func testConcurrentSameKey(t *testing.T, f *fixture) {
	const n = 50
	c := f.deposit("acct_42", "train.create")
	attempts := make([]ledger.Admission, n)
	for i := range n {
		// Each retry carries its own freshly minted decision and run id.
		attempts[i] = admission(c, "key-1", "req-1")
	}
	stored := make([]ledger.Admission, n)
	errs := make([]error, n)
	race(n, func(i int) {
		var replayed bool
		stored[i], replayed, errs[i] = f.s.Commit(f.ctx, attempts[i])
		if errs[i] == nil && replayed {
			errs[i] = errReplayed
		}
	})
	fresh := soleWinner(t, "Commit", errs, errReplayed)
	want := attempts[fresh]
	for i := range n {
		if !equal(stored[i], want) {
			t.Fatalf("Commit %d stored =\n %+v\nwant the winner's\n %+v", i, stored[i], want)
		}
		if i != fresh {
			f.wantNoRun(attempts[i].RunID)
		}
	}
	f.wantState(c.Ref, ledger.ConfirmationConsumed, "key-1")
	f.wantAdmission("acct_42", "key-1", want)
}

func testClosedStore(t *testing.T, f *fixture) {
	c := f.deposit("acct_42", "train.create")
	a := admission(c, "key-1", "req-1")
	if err := f.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx := f.ctx
	calls := map[string]func() error{
		"Ping": func() error { return f.s.Ping(ctx) },
		"DepositConfirmation": func() error {
			return f.s.DepositConfirmation(ctx, f.confirmation("acct_42", "train.create"))
		},
		"Confirmation": func() error { _, err := f.s.Confirmation(ctx, c.Ref); return err },
		"Admission":    func() error { _, err := f.s.Admission(ctx, "acct_42", "key-1"); return err },
		"Run":          func() error { _, err := f.s.Run(ctx, a.RunID); return err },
		"Commit":       func() error { _, _, err := f.s.Commit(ctx, a); return err },
		"Sweep":        func() error { _, err := f.s.Sweep(ctx, base.Add(time.Hour), 0); return err },
	}
	for name, call := range calls {
		wantErr(t, name+" after Close", call(), ledger.ErrUnavailable)
	}
	if err := f.s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func testCancelledContext(t *testing.T, f *fixture) {
	c := f.deposit("acct_42", "train.create")
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	a := admission(c, "key-1", "req-1")

	fresh := f.confirmation("acct_42", "train.create")
	wantErr(t, "DepositConfirmation", f.s.DepositConfirmation(ctx, fresh), context.Canceled)
	if _, err := f.s.Confirmation(f.ctx, fresh.Ref); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("cancelled deposit was written: %v", err)
	}
	_, _, err := f.s.Commit(ctx, a)
	wantErr(t, "Commit", err, context.Canceled)
	f.wantConfirmation(c.Ref, c)
	f.wantNothingFrom(a)

	_, err = f.s.Sweep(ctx, base.Add(time.Hour), 0)
	wantErr(t, "Sweep", err, context.Canceled)
	f.wantConfirmation(c.Ref, c)

	_, err = f.s.Confirmation(ctx, c.Ref)
	wantErr(t, "Confirmation", err, context.Canceled)
	_, err = f.s.Admission(ctx, "acct_42", "key-1")
	wantErr(t, "Admission", err, context.Canceled)
	_, err = f.s.Run(ctx, a.RunID)
	wantErr(t, "Run", err, context.Canceled)
	wantErr(t, "Ping", f.s.Ping(ctx), context.Canceled)

	// Errors from a cancelled context are not store faults.
	if _, _, err := f.s.Commit(ctx, a); errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Commit with cancelled ctx = %v, must not wrap ErrUnavailable", err)
	}
}
