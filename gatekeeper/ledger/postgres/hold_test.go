package postgres

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/ledgertest"
)

// TestRestoreHold: the ledger as a restored dump leaves it — one
// confirmation consumed, one available that may have been consumed after
// the dump — is held by Hold until the later of the restore plus the
// longest confirmation lifetime and the available one's expiry, plus the
// leeway. Meanwhile every replica refuses deposits and commits with
// ErrUnavailable and fails Ping naming the hold: one opened after the hold
// at Open, one opened before at its next Ping. Reads answer. Once the hold
// has passed, deposits and commits go through.
func TestRestoreHold(t *testing.T) {
	opts := testOptions(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	s := open(t, opts)
	defer s.Close()
	c1 := ledgertest.Deposit(t, s, "jti-1", t0, 10*time.Minute)
	if _, _, err := s.Commit(t.Context(), ledgertest.AdmissionOf(c1, "k1", t0)); err != nil {
		t.Fatal(err)
	}
	c2 := ledgertest.Deposit(t, s, "jti-2", t0, 2*time.Hour) // available in the dump, expiring after now + lifetime
	clock := t0.Add(time.Minute)
	before := open(t, Options{DSN: opts.DSN, Schema: opts.Schema, MaxConns: 2, StatementTimeout: opts.StatementTimeout,
		AcquireTimeout: opts.AcquireTimeout, ConnectTimeout: opts.ConnectTimeout, Now: func() time.Time { return clock }})
	defer before.Close()

	if _, err := s.Hold(t.Context(), "dump", 0, time.Second, t0); err == nil {
		t.Fatal("Hold with no lifetime: nil")
	}
	rep, err := s.Hold(t.Context(), "ledger-20260101.dump", time.Hour, 30*time.Second, t0)
	if err != nil {
		t.Fatal(err)
	}
	wantHold := c2.ExpiresAt.Add(30*time.Second + time.Second)
	if rep.Available != 1 || !rep.LatestExpiry.Equal(c2.ExpiresAt) || !rep.HoldUntil.Equal(wantHold) || rep.Check.Admissions != 1 {
		t.Fatalf("Hold = %+v; want 1 available expiring %v, held until %v, 1 admission", rep, c2.ExpiresAt, wantHold)
	}
	// A second Hold never shortens the first.
	if again, err := s.Hold(t.Context(), "older.dump", time.Minute, 0, t0); err != nil || !again.HoldUntil.Equal(wantHold) {
		t.Fatalf("Hold again = %+v, %v; want the hold kept until %v", again, err, wantHold)
	}

	var logs bytes.Buffer
	after := opts
	after.Now = func() time.Time { return clock }
	after.Log = slog.New(slog.NewTextHandler(&logs, nil))
	r := open(t, after)
	defer r.Close()
	if !strings.Contains(logs.String(), `msg="ledger restored from a backup: deposits and admissions are held"`) {
		t.Errorf("open log: %s", logs.String())
	}
	for name, st := range map[string]*Store{"opened after the hold": r, "opened before the hold": before} {
		if err := st.Ping(t.Context()); !errors.Is(err, ledger.ErrUnavailable) ||
			!strings.Contains(err.Error(), "held until "+wantHold.Format(time.RFC3339)) {
			t.Fatalf("%s: Ping during the hold = %v", name, err)
		}
		if !st.HoldUntil().Equal(wantHold) {
			t.Fatalf("%s: HoldUntil = %v", name, st.HoldUntil())
		}
		if _, _, err := st.Commit(t.Context(), ledgertest.AdmissionOf(c2, "k2-"+name, clock)); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("%s: Commit during the hold = %v, want ErrUnavailable", name, err)
		}
		lost := ledger.Confirmation{Ref: ledger.NewConfirmationRef(), JTI: "jti-lost", Account: ledgertest.RestoreAccount, Action: "train.create",
			Token: []byte("h.p.s"), ExpiresAt: clock.Add(time.Hour), DepositedAt: clock, BookingID: ledgertest.RestoreBooking}
		if err := st.DepositConfirmation(t.Context(), lost); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("%s: deposit during the hold = %v, want ErrUnavailable", name, err)
		}
		if a, err := st.Admission(t.Context(), ledgertest.RestoreAccount, "k1"); err != nil || a.ConfirmationRef != c1.Ref {
			t.Fatalf("%s: read during the hold = %+v, %v", name, a, err)
		}
	}
	if c, err := r.Confirmation(t.Context(), c2.Ref); err != nil || c.State != ledger.ConfirmationAvailable {
		t.Fatalf("nothing was consumed during the hold: %+v, %v", c, err)
	}

	// After the hold.
	clock = wantHold
	if err := r.Ping(t.Context()); err != nil {
		t.Fatalf("Ping after the hold = %v", err)
	}
	c3 := ledgertest.Deposit(t, r, "jti-3", clock, 10*time.Minute)
	if _, _, err := r.Commit(t.Context(), ledgertest.AdmissionOf(c3, "k3", clock)); err != nil {
		t.Fatalf("Commit after the hold = %v", err)
	}
}
