package ledgertest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// race runs n calls of fn at once (as far as the scheduler allows) and
// waits for all of them.
func race(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			fn(i)
		})
	}
	close(start)
	wg.Wait()
}

// errReplayed marks a Commit that returned an earlier admission, so that
// soleWinner can tell the one fresh commit among replays.
var errReplayed = errors.New("replayed an earlier admission")

// soleWinner checks the outcome of a race: exactly one call succeeded (nil
// error) and every other one failed with lost. It returns the winner's index.
func soleWinner(t *testing.T, what string, errs []error, lost error) int {
	t.Helper()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil:
			if winner >= 0 {
				t.Fatalf("%s %d and %d both won", what, winner, i)
			}
			winner = i
		case !errors.Is(err, lost):
			t.Fatalf("%s %d: %v, want nil or %v", what, i, err, lost)
		}
	}
	if winner < 0 {
		t.Fatalf("no %s won: every one got %v", what, lost)
	}
	return winner
}

// testConcurrentSameKeyOtherConfirmations: retries of one request race, each
// naming a different available confirmation (a client that fetched a new
// confirmation for its retry). One confirmation is consumed; every caller
// gets that one admission; the other confirmations stay available.
func testConcurrentSameKeyOtherConfirmations(t *testing.T, f *fixture) {
	const n = 20
	confs := make([]ledger.Confirmation, n)
	attempts := make([]ledger.Admission, n)
	for i := range n {
		confs[i] = f.deposit("acct_42", "train.create")
		attempts[i] = admission(confs[i], "key-1", "req-1")
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
	winner := soleWinner(t, "Commit", errs, errReplayed)
	for i := range n {
		if !equal(stored[i], attempts[winner]) {
			t.Fatalf("Commit %d returned\n %+v\nwant the winner's\n %+v", i, stored[i], attempts[winner])
		}
		if i == winner {
			f.wantState(confs[i].Ref, ledger.ConfirmationConsumed, "key-1")
			continue
		}
		f.wantConfirmation(confs[i].Ref, confs[i])
		f.wantNoRun(attempts[i].RunID)
	}
	f.wantAdmission("acct_42", "key-1", attempts[winner])
}

// testConcurrentKeyConflicts: different requests race for one key, each
// with its own confirmation. One commits; the others get ErrKeyConflict and
// consume nothing.
func testConcurrentKeyConflicts(t *testing.T, f *fixture) {
	const n = 20
	confs := make([]ledger.Confirmation, n)
	attempts := make([]ledger.Admission, n)
	for i := range n {
		confs[i] = f.deposit("acct_42", "train.create")
		attempts[i] = admission(confs[i], "key-1", fmt.Sprintf("req-%d", i))
	}
	errs := make([]error, n)
	race(n, func(i int) { _, _, errs[i] = f.s.Commit(f.ctx, attempts[i]) })
	winner := soleWinner(t, "Commit", errs, ledger.ErrKeyConflict)
	for i := range n {
		if i == winner {
			f.wantState(confs[i].Ref, ledger.ConfirmationConsumed, "key-1")
			continue
		}
		f.wantConfirmation(confs[i].Ref, confs[i])
		f.wantNoRun(attempts[i].RunID)
	}
	f.wantAdmission("acct_42", "key-1", attempts[winner])
}

// testConcurrentDepositsOneJTI: deposits of one jti under different
// references race; exactly one is stored.
func testConcurrentDepositsOneJTI(t *testing.T, f *fixture) {
	const n = 20
	confs := make([]ledger.Confirmation, n)
	for i := range n {
		confs[i] = f.confirmation("acct_42", "train.create")
		confs[i].JTI = "jti-shared"
	}
	errs := make([]error, n)
	race(n, func(i int) { errs[i] = f.s.DepositConfirmation(f.ctx, confs[i]) })
	winner := soleWinner(t, "deposit", errs, ledger.ErrConfirmationDuplicate)
	for i, c := range confs {
		_, err := f.s.Confirmation(f.ctx, c.Ref)
		if (i == winner) != (err == nil) {
			t.Fatalf("Confirmation(deposit %d, winner %d) = %v", i, winner, err)
		}
	}
}

// testConcurrentSweepAndCommit: sweeps past the expiry race commits of the
// confirmations being swept. Each confirmation ends consumed with its
// admission, or expired with none: never both, never a consumed one without
// its admission, and a sweep never frees a consumed one.
func testConcurrentSweepAndCommit(t *testing.T, f *fixture) {
	const n = 60
	confs := make([]ledger.Confirmation, n)
	attempts := make([]ledger.Admission, n)
	for i := range n {
		confs[i] = f.deposit("acct_42", "train.create")
		attempts[i] = admission(confs[i], fmt.Sprintf("key-%02d", i), fmt.Sprintf("req-%02d", i))
	}
	after := base.Add(ttl + time.Minute)
	errs := make([]error, n)
	sweepErrs := make([]error, 4)
	race(n+len(sweepErrs), func(i int) {
		if i >= n {
			for range 5 {
				if _, err := f.s.Sweep(f.ctx, after, 0); err != nil {
					sweepErrs[i-n] = err
					return
				}
			}
			return
		}
		_, _, errs[i] = f.s.Commit(f.ctx, attempts[i])
	})
	for _, err := range sweepErrs {
		if err != nil {
			t.Fatalf("Sweep: %v", err)
		}
	}
	if _, err := f.s.Sweep(f.ctx, after, 0); err != nil {
		t.Fatalf("final Sweep: %v", err)
	}
	for i, err := range errs {
		c, cerr := f.s.Confirmation(f.ctx, confs[i].Ref)
		if cerr != nil {
			t.Fatal(cerr)
		}
		if c.Token != nil {
			t.Fatalf("confirmation %d kept its token after the final sweep", i)
		}
		switch {
		case err == nil:
			if c.State != ledger.ConfirmationConsumed || c.ConsumedBy != attempts[i].IdempotencyKey {
				t.Fatalf("committed confirmation %d is %q by %q", i, c.State, c.ConsumedBy)
			}
			f.wantAdmission("acct_42", attempts[i].IdempotencyKey, attempts[i])
		case errors.Is(err, ledger.ErrConfirmationExpired):
			if c.State != ledger.ConfirmationExpired {
				t.Fatalf("confirmation %d: Commit said expired, state %q", i, c.State)
			}
			f.wantNothingFrom(attempts[i])
		default:
			t.Fatalf("Commit %d: %v, want nil or ErrConfirmationExpired", i, err)
		}
	}
}

// testRunIDReused: a train.create admission whose run id another admission
// already created is refused with ErrInvalid, and nothing is written.
func testRunIDReused(t *testing.T, f *fixture) {
	first := f.commit(admission(f.deposit("acct_42", "train.create"), "key-1", "req-1"))
	c := f.deposit("acct_42", "train.create")
	a := admission(c, "key-2", "req-2")
	a.RunID = first.RunID
	_, _, err := f.s.Commit(f.ctx, a)
	wantErr(t, "Commit with a reused run id", err, ledger.ErrInvalid)
	f.wantNoAdmission("acct_42", "key-2")
	f.wantConfirmation(c.Ref, c)
	run, err := f.s.Run(f.ctx, first.RunID)
	if err != nil || !equal(run, first) {
		t.Fatalf("Run = %+v, %v; want the first admission", run, err)
	}
}

// testCommitTimePrecision: a CreatedAt finer than the backend keeps comes
// back from Commit exactly as every later read returns it, so a fresh allow
// and its replays are identical.
func testCommitTimePrecision(t *testing.T, f *fixture) {
	c := f.confirmation("acct_42", "train.create")
	c.ExpiresAt = c.ExpiresAt.Add(123 * time.Nanosecond)
	if err := f.s.DepositConfirmation(f.ctx, c); err != nil {
		t.Fatal(err)
	}
	a := admission(c, "key-1", "req-1")
	a.CreatedAt = base.Add(987654321 * time.Nanosecond).In(time.FixedZone("X", 3600))
	stored := f.commit(a)
	if d := stored.CreatedAt.Sub(a.CreatedAt); d > 0 || d <= -time.Microsecond {
		t.Fatalf("stored CreatedAt %v is not %v to the microsecond", stored.CreatedAt, a.CreatedAt)
	}
	if stored.CreatedAt.Location() != time.UTC {
		t.Fatalf("stored CreatedAt in %v, want UTC", stored.CreatedAt.Location())
	}
	f.wantAdmission("acct_42", "key-1", stored)
	again, replayed, err := f.s.Commit(f.ctx, a)
	if err != nil || !replayed || !equal(again, stored) {
		t.Fatalf("replay = %+v, %v, %v; want %+v", again, replayed, err, stored)
	}
	got, err := f.s.Confirmation(f.ctx, c.Ref)
	if err != nil || !got.ConsumedAt.Equal(stored.CreatedAt) {
		t.Fatalf("ConsumedAt = %v, %v; want the stored CreatedAt %v", got.ConsumedAt, err, stored.CreatedAt)
	}
	if d := got.ExpiresAt.Sub(c.ExpiresAt); d > 0 || d <= -time.Microsecond {
		t.Fatalf("ExpiresAt %v is not %v to the microsecond", got.ExpiresAt, c.ExpiresAt)
	}
}

// testLongAndUnicodeIDs: identifiers at MaxIDLen bytes and outside ASCII
// round-trip exactly.
func testLongAndUnicodeIDs(t *testing.T, f *fixture) {
	account := strings.Repeat("ä", ledger.MaxIDLen/2) // 2 bytes each
	key := "ключ-" + strings.Repeat("k", ledger.MaxIDLen-len("ключ-"))
	c := f.confirmation(account, "train.create")
	c.JTI = strings.Repeat("漢", ledger.MaxIDLen/3)
	c.BookingID = "bk-ünï"
	if err := f.s.DepositConfirmation(f.ctx, c); err != nil {
		t.Fatal(err)
	}
	c.State = ledger.ConfirmationAvailable
	f.wantConfirmation(c.Ref, c)
	a := admission(c, key, "req-1")
	stored := f.commit(a)
	f.wantAdmission(account, key, stored)
	if run, err := f.s.Run(f.ctx, a.RunID); err != nil || !equal(run, a) {
		t.Fatalf("Run = %+v, %v", run, err)
	}
	// A key differing only in its last byte is another slot.
	f.wantNoAdmission(account, key[:len(key)-1]+"j")
}
