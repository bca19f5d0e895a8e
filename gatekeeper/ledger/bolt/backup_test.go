package bolt

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/ledgertest"
)

// TestBackupRestore: a backup taken while the store serves is the ledger as
// of its transaction; restored over the live file (kept beside it), the
// ledger holds every deposit and commit — the confirmation that was
// available in the backup and consumed after it, and a confirmation
// deposited and consumed after it, deposited again — until both have
// expired, and the service is not ready meanwhile; after the hold, the
// confirmation consumed after the backup is expired, never spendable again.
func TestBackupRestore(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	t0 := time.Now().UTC().Truncate(time.Second)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c1 := ledgertest.Deposit(t, s, "jti-1", t0, 10*time.Minute)
	if _, _, err := s.Commit(t.Context(), ledgertest.AdmissionOf(c1, "k1", t0)); err != nil {
		t.Fatal(err)
	}
	c2 := ledgertest.Deposit(t, s, "jti-2", t0, 30*time.Minute) // available in the backup
	backup, n, err := s.BackupFile(t.Context(), filepath.Join(dir, "backups"), t0)
	if err != nil || n == 0 || !strings.HasPrefix(filepath.Base(backup), "ledger-") {
		t.Fatalf("BackupFile = %q, %d, %v", backup, n, err)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v, %v", fi, err)
	}
	// After the backup: c2 consumed, c3 deposited and consumed.
	if _, _, err := s.Commit(t.Context(), ledgertest.AdmissionOf(c2, "k2", t0)); err != nil {
		t.Fatal(err)
	}
	c3 := ledgertest.Deposit(t, s, "jti-3", t0, 20*time.Minute)
	if _, _, err := s.Commit(t.Context(), ledgertest.AdmissionOf(c3, "k3", t0)); err != nil {
		t.Fatal(err)
	}

	// A running store's file is not replaced.
	f, err := os.Open(backup)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Restore(t.Context(), f, backup, path, time.Hour, 30*time.Second, t0.Add(time.Minute))
	f.Close()
	if !errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), "holds "+path+": stop the server first") {
		t.Fatalf("Restore over a served file = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	restoredAt := t0.Add(time.Minute)
	f, err = os.Open(backup)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Restore(t.Context(), f, backup, path, time.Hour, 30*time.Second, restoredAt)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	wantHold := restoredAt.Add(time.Hour + 30*time.Second + time.Second)
	if rep.Available != 1 || !rep.LatestExpiry.Equal(c2.ExpiresAt) || !rep.HoldUntil.Equal(wantHold) ||
		rep.Check.Admissions != 1 || rep.Previous == "" {
		t.Fatalf("Restore = %+v; want 1 available expiring %v, hold until %v, 1 admission, the old file kept", rep, c2.ExpiresAt, wantHold)
	}
	// The replaced file is kept as it was: three admissions.
	old, err := Open(rep.Previous, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if cr, err := old.Check(t.Context()); err != nil || cr.Admissions != 3 {
		t.Fatalf("kept file: %+v, %v", cr, err)
	}
	old.Close()

	// During the hold: no deposit, no commit, not ready; reads answer.
	clock := restoredAt.Add(2 * time.Minute)
	var logs bytes.Buffer
	r, err := Open(path, Options{Now: func() time.Time { return clock }, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !strings.Contains(logs.String(), `msg="ledger restored from a backup: deposits and admissions are held"`) {
		t.Errorf("open log: %s", logs.String())
	}
	if err := r.Ping(t.Context()); !errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), "held until") {
		t.Fatalf("Ping during the hold = %v", err)
	}
	if _, _, err := r.Commit(t.Context(), ledgertest.AdmissionOf(c2, "k2-again", clock)); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Commit of the confirmation consumed after the backup, during the hold = %v, want ErrUnavailable", err)
	}
	c3.DepositedAt = clock
	if err := r.DepositConfirmation(t.Context(), c3); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("deposit again of a confirmation lost with the backup, during the hold = %v, want ErrUnavailable", err)
	}
	if a, err := r.Admission(t.Context(), ledgertest.RestoreAccount, "k1"); err != nil || a.ConfirmationRef != c1.Ref {
		t.Fatalf("read during the hold = %+v, %v", a, err)
	}

	// After the hold: ready, and c2 is expired, not spendable (the
	// admission verifies its stored token's exp first; the sweeper marks it).
	clock = rep.HoldUntil
	if err := r.Ping(t.Context()); err != nil {
		t.Fatalf("Ping after the hold = %v", err)
	}
	if !clock.After(c2.ExpiresAt) {
		t.Fatalf("hold until %v, before c2 expires (%v)", clock, c2.ExpiresAt)
	}
	if n, err := r.Sweep(t.Context(), clock, 30*time.Second); err != nil || n != 2 {
		t.Fatalf("Sweep after the hold = %d, %v; want the tokens of c1 (consumed) and c2 dropped", n, err)
	}
	if _, _, err := r.Commit(t.Context(), ledgertest.AdmissionOf(c2, "k2-again", clock)); !errors.Is(err, ledger.ErrConfirmationExpired) {
		t.Fatalf("Commit after the hold = %v, want ErrConfirmationExpired", err)
	}
	c4 := ledgertest.Deposit(t, r, "jti-4", clock, 10*time.Minute)
	if _, _, err := r.Commit(t.Context(), ledgertest.AdmissionOf(c4, "k4", clock)); err != nil {
		t.Fatalf("a fresh admission after the hold: %v", err)
	}
	if cr, err := r.Check(t.Context()); err != nil || cr.Admissions != 2 {
		t.Fatalf("Check = %+v, %v", cr, err)
	}
}

// TestRestoreRefusesInconsistentBackup: a backup that fails its check is
// not restored, and the file at path is left untouched.
func TestRestoreRefusesInconsistentBackup(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.db")
	s, err := Open(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	c := ledgertest.Deposit(t, s, "jti-x", now, time.Hour)
	if _, _, err := s.Commit(t.Context(), ledgertest.AdmissionOf(c, "kx", now)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	rawUpdate(t, src, func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketAdmissions).Delete(admissionKey(ledgertest.RestoreAccount, "kx"))
	})
	path := filepath.Join(dir, "ledger.db")
	if err := os.WriteFile(path, []byte("current"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = Restore(t.Context(), f, src, path, time.Hour, 0, now)
	if !errors.Is(err, ledger.ErrInconsistent) {
		t.Fatalf("Restore(inconsistent) = %v, want ErrInconsistent", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "current" {
		t.Fatalf("the file at path changed: %q", b)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".ledger-restore-*")); len(m) != 0 {
		t.Fatalf("left behind: %v", m)
	}
}
