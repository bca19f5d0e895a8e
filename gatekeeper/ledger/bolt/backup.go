package bolt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	bbolt "go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// Backups and restores (README: "The ledger: check, migrations, backup").
//
// Backup writes a consistent copy of the file while the store serves: one
// read transaction's WriteTo, so commits go on meanwhile and the copy is
// the ledger as of that transaction.
//
// A restored file lacks what happened after its backup: confirmations it
// shows available may have been consumed since, and confirmations deposited
// and consumed since are missing, so their depositor could deposit them
// again. Restore therefore writes a hold into the file: until then the
// store refuses every deposit and commit (ledger.ErrUnavailable, so the
// service answers 503 and is not ready) and reads answer as usual. The hold
// lasts until every confirmation that could have been consumed after the
// backup has expired: the latest expiry of the confirmations the backup
// shows available, and the restore time plus the longest confirmation
// lifetime the operator names.

var (
	keyHoldUntil    = []byte("hold_until")    // RFC 3339 UTC; absent: no hold
	keyRestoredAt   = []byte("restored_at")   // RFC 3339 UTC
	keyRestoredFrom = []byte("restored_from") // the backup's base name
)

// Backup writes a consistent copy of the ledger to w while the store keeps
// serving, and returns the bytes written.
func (s *Store) Backup(ctx context.Context, w io.Writer) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var n int64
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		return n, unavailable("backup", err)
	}
	return n, nil
}

// BackupFile writes a backup into dir (created 0700 if missing) as
// ledger-<UTC time>.db, mode 0600, synced and renamed into place, and
// returns its path and size.
func (s *Store) BackupFile(ctx context.Context, dir string, now time.Time) (string, int64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", 0, fmt.Errorf("ledger: backup: %w", err)
	}
	path := filepath.Join(dir, "ledger-"+now.UTC().Format("20060102T150405.000Z")+".db")
	tmp, err := os.CreateTemp(dir, ".ledger-backup-*")
	if err != nil {
		return "", 0, fmt.Errorf("ledger: backup: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	n, err := s.Backup(ctx, tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return "", 0, fmt.Errorf("ledger: backup: %w", err)
	}
	return path, n, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// HoldUntil is the end of the hold a restore wrote (zero: none).
func (s *Store) HoldUntil() time.Time { return s.holdUntil }

// held refuses a deposit or commit while a restore's hold lasts.
func (s *Store) held(op string) error {
	if err := ledger.Held(s.holdUntil, s.now()); err != nil {
		return unavailable(op, err)
	}
	return nil
}

func readHold(tx *bbolt.Tx) (time.Time, error) {
	v := tx.Bucket(bucketMeta).Get(keyHoldUntil)
	if v == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, string(v))
	if err != nil {
		return time.Time{}, fmt.Errorf("hold_until %q: %w", v, err)
	}
	return t, nil
}

// RestoreReport is what Restore did.
type RestoreReport struct {
	// Path is the restored ledger; Previous where the file it replaced was
	// moved ("" when there was none).
	Path, Previous string
	// Check is the restored file's check (it is consistent, or Restore
	// failed).
	Check ledger.CheckReport
	// Available is how many confirmations the backup shows available (each
	// may have been consumed after the backup); LatestExpiry the latest of
	// their expiries.
	Available    int
	LatestExpiry time.Time
	// HoldUntil is when the restored ledger takes deposits and admissions
	// again.
	HoldUntil time.Time
}

// Restore makes the backup read from r the ledger at path, for a server that
// is stopped (the file's lock is taken, so a running one is refused): the
// copy is written beside path, migrated to this binary's schema if older,
// checked (an inconsistent backup is refused), given its hold — until the
// later of now + maxLifetime (the longest lifetime of a confirmation your
// issuer mints) and the latest expiry of the confirmations it shows
// available, plus leeway — and renamed into place. A file already at path
// is kept, renamed to path.before-restore-<UTC time>.
func Restore(ctx context.Context, r io.Reader, from, path string, maxLifetime, leeway time.Duration, now time.Time) (RestoreReport, error) {
	rep := RestoreReport{Path: path}
	if maxLifetime <= 0 || leeway < 0 {
		return rep, fmt.Errorf("ledger: restore: the longest confirmation lifetime must be positive (got %v), leeway not negative", maxLifetime)
	}
	now = now.UTC()
	if _, err := os.Stat(path); err == nil {
		// A server holding it is refused here, before anything is written.
		db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: DefaultTimeout, ReadOnly: true})
		switch {
		case errors.Is(err, bbolterrors.ErrTimeout):
			return rep, unavailable("restore", fmt.Errorf("another process%s holds %s: stop the server first", lockHolder(path), path))
		case err == nil:
			_ = db.Close()
		}
		// Any other file there (even a broken one) is kept, renamed.
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".ledger-restore-*")
	if err != nil {
		return rep, fmt.Errorf("ledger: restore: %w", err)
	}
	tmpPath := tmp.Name()
	defer func() { _ = os.Remove(tmpPath) }()
	_, err = io.Copy(tmp, r)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return rep, fmt.Errorf("ledger: restore: copying the backup: %w", err)
	}
	s, err := Open(tmpPath, Options{})
	if err != nil {
		return rep, fmt.Errorf("ledger: restore: the backup: %w", err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = s.Close()
		}
	}()
	if rep.Check, err = s.Check(ctx); err != nil {
		return rep, fmt.Errorf("ledger: restore: the backup fails its check, not restored: %w", err)
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		err := tx.Bucket(bucketConfirmations).ForEach(func(k, v []byte) error {
			c, err := decodeConfirmation(v)
			if err != nil {
				return fmt.Errorf("confirmation %q: %w", k, err)
			}
			if c.State == ledger.ConfirmationAvailable {
				rep.Available++
				if c.ExpiresAt.After(rep.LatestExpiry) {
					rep.LatestExpiry = c.ExpiresAt.UTC()
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		prev, _ := readHold(tx) // an unreadable hold is replaced
		rep.HoldUntil = ledger.HoldEnd(now, maxLifetime, leeway, rep.LatestExpiry, prev)
		meta := tx.Bucket(bucketMeta)
		for k, v := range map[string]string{
			string(keyHoldUntil): rep.HoldUntil.Format(time.RFC3339), string(keyRestoredAt): now.Format(time.RFC3339),
			string(keyRestoredFrom): filepath.Base(from),
		} {
			if err := meta.Put([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
		return nil
	})
	closed = true
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return rep, fmt.Errorf("ledger: restore: %w", err)
	}
	if _, err := os.Stat(path); err == nil {
		rep.Previous = path + ".before-restore-" + now.Format("20060102T150405Z")
		if err := os.Rename(path, rep.Previous); err != nil {
			return rep, fmt.Errorf("ledger: restore: keeping the current file: %w", err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return rep, fmt.Errorf("ledger: restore: %w", err)
	}
	if err := os.Rename(tmpPath, path); err != nil {
		return rep, fmt.Errorf("ledger: restore: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return rep, fmt.Errorf("ledger: restore: %w", err)
	}
	return rep, nil
}
