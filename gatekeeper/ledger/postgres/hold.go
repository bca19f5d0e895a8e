package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// The restore hold of a PostgreSQL ledger (ledger.HoldEnd, ledger.Held):
// the one row of restore_hold, written by Hold after an operator restored a
// dump. Open reads it, and so does every Ping, so a replica started before
// the row was written takes it on at its next readiness probe; until
// hold_until DepositConfirmation and Commit are refused with
// ledger.ErrUnavailable and Ping fails, naming the hold.

// HoldReport is what Hold did.
type HoldReport struct {
	// Check is the restored ledger's check (it is consistent, or Hold
	// failed and wrote nothing).
	Check ledger.CheckReport
	// Available is how many confirmations the restored ledger shows
	// available (each may have been consumed after the dump); LatestExpiry
	// the latest of their expiries (zero when none).
	Available    int
	LatestExpiry time.Time
	// HoldUntil is when the ledger takes deposits and admissions again.
	HoldUntil time.Time
}

// Hold writes the restore hold into the ledger an operator has just
// restored from a dump: it checks the ledger (an inconsistent one is
// refused, nothing written), then, in one transaction, holds it until
// ledger.HoldEnd(now, maxLifetime, leeway, the latest expiry of the
// available confirmations, the hold already there). from names the dump,
// for the record. Errors wrap ledger.ErrInconsistent or
// ledger.ErrUnavailable.
func (s *Store) Hold(ctx context.Context, from string, maxLifetime, leeway time.Duration, now time.Time) (HoldReport, error) {
	var rep HoldReport
	if maxLifetime <= 0 || leeway < 0 {
		return rep, fmt.Errorf("ledger: hold: the longest confirmation lifetime must be positive (got %v), leeway not negative", maxLifetime)
	}
	var err error
	if rep.Check, err = s.Check(ctx); err != nil {
		return rep, fmt.Errorf("ledger: hold: the restored ledger fails its check, no hold written: %w", err)
	}
	conn, err := s.acquire(ctx, "hold")
	if err != nil {
		return rep, err
	}
	defer conn.Release()
	qctx, cancel := s.bound(ctx, 4)
	defer cancel()
	now = now.UTC()
	err = pgx.BeginFunc(qctx, conn, func(tx pgx.Tx) error {
		var latest *time.Time
		if err := tx.QueryRow(qctx, s.q.holdAvailable).Scan(&rep.Available, &latest); err != nil {
			return err
		}
		if latest != nil {
			rep.LatestExpiry = latest.UTC()
		}
		prev, err := queryHold(qctx, tx, s.q.hold)
		if err != nil {
			return err
		}
		rep.HoldUntil = ledger.HoldEnd(now, maxLifetime, leeway, rep.LatestExpiry, prev)
		_, err = tx.Exec(qctx, s.q.writeHold, rep.HoldUntil, now, from)
		return err
	})
	if err != nil {
		return rep, s.fault(ctx, "hold", err)
	}
	s.holdUntil.Store(rep.HoldUntil.UnixNano())
	return rep, nil
}

// HoldUntil is the end of the restore hold last read (Open, Ping, Hold);
// zero when there is none.
func (s *Store) HoldUntil() time.Time {
	if n := s.holdUntil.Load(); n != 0 {
		return time.Unix(0, n).UTC()
	}
	return time.Time{}
}

// held refuses a deposit or commit while the hold lasts.
func (s *Store) held(op string) error {
	if err := ledger.Held(s.HoldUntil(), s.now()); err != nil {
		return fmt.Errorf("ledger: postgres: %s: %w: %w", op, ledger.ErrUnavailable, err)
	}
	return nil
}

// readHold reads the hold row into the store.
func (s *Store) readHold(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) error {
	until, err := queryHold(ctx, q, s.q.hold)
	if err != nil {
		return err
	}
	var n int64
	if !until.IsZero() {
		n = until.UnixNano()
	}
	s.holdUntil.Store(n)
	return nil
}

func queryHold(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, query string) (time.Time, error) {
	var until time.Time
	err := q.QueryRow(ctx, query).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, nil
	}
	return until.UTC(), err
}
