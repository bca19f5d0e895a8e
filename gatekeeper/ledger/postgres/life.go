package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// bookingLockKey is the advisory lock that serializes commits on one booking
// in this schema.
func bookingLockKey(schema, booking string) int64 {
	return lockKey("itogate.ledger.booking/" + schema + "/" + booking)
}

// entitlementLockKey is the advisory lock that serializes the creates under
// one entitlement with its revocation.
func entitlementLockKey(schema, jti string) int64 {
	return lockKey("itogate.ledger.entitlement/" + schema + "/" + jti)
}

func lockKey(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}

// commitLocks are the two advisory locks a commit takes (lockBooking): the
// booking's, and for a create under an entitlement that entitlement's.
func (s *Store) commitLocks(a ledger.Admission) (int64, int64) {
	booking := bookingLockKey(s.opts.Schema, a.BookingID)
	if a.Action.Effect() == api.EffectCreateRun && a.EntitlementJTI != "" {
		return booking, entitlementLockKey(s.opts.Schema, a.EntitlementJTI)
	}
	return booking, booking
}

func (s *Store) commitOnce(ctx context.Context, a ledger.Admission) (ledger.Admission, bool, error) {
	conn, err := s.acquire(ctx, "commit")
	if err != nil {
		return ledger.Admission{}, false, err
	}
	defer conn.Release()
	qctx, cancel := s.bound(ctx, 1)
	defer cancel()

	if stored, replayed, done, err := s.precheck(qctx, conn, a); done || err != nil {
		if err != nil && !isDomain(err) {
			return ledger.Admission{}, false, s.fault(ctx, "commit", err)
		}
		return stored, replayed, err
	}

	// One round trip, one implicit transaction: the booking's lock, then
	// the conditional write, whose snapshot is taken after the lock. The
	// lock is held inside the server only, never across a round trip.
	kinds, subjects := revocationArrays(a)
	spec, _ := a.Action.Spec()
	var liveUntil *time.Time
	if !a.LiveUntil.IsZero() {
		liveUntil = &a.LiveUntil
	}
	b := &pgx.Batch{}
	lock1, lock2 := s.commitLocks(a)
	b.Queue(s.q.lockBooking, lock1, lock2)
	b.Queue(s.q.commit, a.Account, a.IdempotencyKey, a.RequestDigest, a.DecisionID, a.RunID,
		a.Action, a.BookingID, a.ManifestDigest, a.ConfirmationRef, a.ConfirmationJTI, a.BundleRevision,
		string(a.State), a.CreatedAt, a.EntitlementJTI, a.CallerKeyID, a.CostMicroUSD, a.GPUs, a.BookedGPUs, liveUntil,
		kinds, subjects, a.Ticket, a.Stage, a.FromStage, a.CheckpointStep, spec.Effect.String(), spec.Stage,
		spec.CheckpointStep, string(spec.RunState),
		a.Plan.IntervalSteps, a.Plan.Steps, a.Plan.WallClockSeconds, a.Plan.LostSecondsPerRestart, a.RestartBudget,
		a.Plan.CheckpointGiB, a.Plan.StorageQuotaGiB, timeOrNil(a.ReportDue), a.StageGPUs)
	br := conn.SendBatch(qctx, b)
	var tag pgconn.CommandTag
	_, err = br.Exec()
	if err == nil {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		// The server refused the batch: its implicit transaction rolled
		// back, nothing was written.
		switch {
		case retryCode(pgErr.Code):
			return ledger.Admission{}, false, &retryable{err: err}
		case pgErr.Code == codeUniqueViolation &&
			(pgErr.ConstraintName == "admissions_created_run_idx" || pgErr.ConstraintName == "runs_pkey"):
			return ledger.Admission{}, false, fmt.Errorf("ledger: commit: run id already admitted: %w", ledger.ErrInvalid)
		case pgErr.Code == codeUniqueViolation:
			// The key was taken by a commit (on another booking) that
			// committed meanwhile: the reads below name the outcome.
		default:
			return ledger.Admission{}, false, s.fault(ctx, "commit", err)
		}
	} else if err != nil {
		if ctx.Err() == nil && pgconn.SafeToRetry(err) {
			return ledger.Admission{}, false, &retryable{err: err}
		}
		// Sent, and then the connection, the client-side bound or ctx
		// gave out: it may or may not have committed.
		if cerr := ctx.Err(); cerr != nil {
			err = fmt.Errorf("%w (%w)", err, cerr)
		}
		return ledger.Admission{}, false, fmt.Errorf("ledger: postgres: commit: outcome unknown: %w: %w", ledger.ErrUnavailable, err)
	} else if tag.RowsAffected() == 1 {
		a.Plan, a.RestartBudget, a.ReportDue, a.StageGPUs = ledger.RunPlan{}, 0, time.Time{}, 0
		return a, false, nil
	}
	return s.explain(qctx, ctx, conn, a)
}

// explain names why the commit statement wrote nothing, with lock-free
// reads in one round trip, in Commit's documented order. Admissions are
// never deleted, bindings never change, confirmation states only move
// forward, and a capacity refusal is derived again from fresh reads; when
// nothing explains it (GPUs were freed meanwhile), the commit runs again.
func (s *Store) explain(qctx, ctx context.Context, conn *txConn, a ledger.Admission) (ledger.Admission, bool, error) {
	kinds, subjects := revocationArrays(a)
	b := &pgx.Batch{}
	b.Queue(s.q.admission, a.Account, a.IdempotencyKey)
	b.Queue(s.q.confirmation, a.ConfirmationRef)
	b.Queue(s.q.revocations, kinds, subjects)
	b.Queue(s.q.runRecord, a.RunID)
	b.Queue(s.q.booking, a.BookingID)
	br := conn.SendBatch(qctx, b)
	prev, perr := scanAdmission(br.QueryRow())
	c, cerr := scanConfirmation(br.QueryRow())
	var revs []ledger.Revocation
	rows, rerr := br.Query()
	if rerr == nil {
		revs, rerr = pgx.CollectRows(rows, scanRevocationRow)
	}
	run, runErr := scanRun(br.QueryRow())
	var (
		bound    string
		released *time.Time
	)
	berr := br.QueryRow().Scan(&bound, &released)
	if err := br.Close(); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return ledger.Admission{}, false, s.fault(ctx, "commit", err)
	}
	if berr != nil && !errors.Is(berr, pgx.ErrNoRows) {
		return ledger.Admission{}, false, s.fault(ctx, "commit", berr)
	}
	switch {
	case perr == nil && prev.RequestDigest == a.RequestDigest:
		return prev, true, nil
	case perr == nil:
		return ledger.Admission{}, false, fmt.Errorf("ledger: commit: %w", ledger.ErrKeyConflict)
	case !errors.Is(perr, pgx.ErrNoRows):
		return ledger.Admission{}, false, s.fault(ctx, "commit", perr)
	case errors.Is(cerr, pgx.ErrNoRows):
		return ledger.Admission{}, false, fmt.Errorf("ledger: commit: confirmation: %w", ledger.ErrNotFound)
	case cerr != nil:
		return ledger.Admission{}, false, s.fault(ctx, "commit", cerr)
	case rerr != nil:
		return ledger.Admission{}, false, s.fault(ctx, "commit", rerr)
	}
	if err := ledger.CheckBindings(c, a); err != nil {
		return ledger.Admission{}, false, err
	}
	if err := ledger.CheckBookingAccount(bound, a); err != nil {
		return ledger.Admission{}, false, err
	}
	want := map[[2]string]bool{}
	for _, p := range ledger.RevocationSubjects(a) {
		want[p] = true
	}
	for _, r := range revs {
		if want[[2]string{string(r.Kind), r.Subject}] {
			return ledger.Admission{}, false, &ledger.RevocationError{Revocation: r}
		}
	}
	if err := confirmationOutcome(c, a); err != nil {
		return ledger.Admission{}, false, err
	}
	switch a.Action.Effect() {
	case api.EffectCreateRun:
		runs, released, err := s.bookingRuns(qctx, conn, a.BookingID, a.CreatedAt)
		if err != nil {
			return ledger.Admission{}, false, s.fault(ctx, "commit", err)
		}
		if err := ledger.CheckCapacity(runs, released, a); err != nil {
			return ledger.Admission{}, false, err
		}
	case api.EffectEndRun:
		if runErr == nil && (run.BookingID != a.BookingID || run.Account != a.Account) {
			return ledger.Admission{}, false, fmt.Errorf("ledger: commit: run of another booking or account: %w", ledger.ErrConfirmationMismatch)
		}
	case api.EffectStepRun:
		switch {
		case errors.Is(runErr, pgx.ErrNoRows):
			return ledger.Admission{}, false, fmt.Errorf("ledger: commit: run: %w", ledger.ErrNotFound)
		case runErr != nil:
			return ledger.Admission{}, false, s.fault(ctx, "commit", runErr)
		}
		if err := ledger.CheckRunStep(run, a); err != nil {
			return ledger.Admission{}, false, err
		}
		if ledger.Grows(run, a) {
			runs, _, err := s.bookingRuns(qctx, conn, a.BookingID, a.CreatedAt)
			if err != nil {
				return ledger.Admission{}, false, s.fault(ctx, "commit", err)
			}
			if err := ledger.CheckGrow(runs, run, a); err != nil {
				return ledger.Admission{}, false, err
			}
		}
	}
	return ledger.Admission{}, false, &retryable{err: errUnexplained}
}

func revocationArrays(a ledger.Admission) ([]string, []string) {
	pairs := ledger.RevocationSubjects(a)
	kinds, subjects := make([]string, len(pairs)), make([]string, len(pairs))
	for i, p := range pairs {
		kinds[i], subjects[i] = p[0], p[1]
	}
	return kinds, subjects
}

// isDomain reports whether err is a ledger outcome (nothing written), not a
// database fault.
func isDomain(err error) bool {
	for _, e := range []error{ledger.ErrNotFound, ledger.ErrKeyConflict, ledger.ErrConfirmationMismatch,
		ledger.ErrCostExceeded, ledger.ErrRevoked, ledger.ErrConfirmationConsumed, ledger.ErrConfirmationExpired,
		ledger.ErrCapacityExceeded, ledger.ErrStorageQuotaExceeded, ledger.ErrBookingReleased, ledger.ErrRunEnded, ledger.ErrStageConflict,
		ledger.ErrRunHalted, ledger.ErrBookingAccount, ledger.ErrRestartOffPlan, ledger.ErrRestartBudget} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// precheck answers, without any lock, what a commit's outcome already is
// when the key is taken or the confirmation cannot be consumed: admissions
// are never deleted, bindings never change and confirmation states only move
// forward, so such an answer is final. done is false when only the locked
// transaction can decide. Racing commits for one confirmation mostly end
// here once it is consumed, instead of queueing for the booking's lock.
func (s *Store) precheck(ctx context.Context, conn *txConn, a ledger.Admission) (stored ledger.Admission, replayed, done bool, err error) {
	// The confirmation first: each read has its own snapshot, and a
	// confirmation seen consumed guarantees its admission (same commit) is
	// seen by the read after it — never "consumed" for our own key's winner.
	b := &pgx.Batch{}
	b.Queue(s.q.confirmation, a.ConfirmationRef)
	b.Queue(s.q.admission, a.Account, a.IdempotencyKey)
	br := conn.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil && !errors.Is(cerr, pgx.ErrNoRows) {
			err = cerr
		}
	}()
	c, cerr := scanConfirmation(br.QueryRow())
	prev, perr := scanAdmission(br.QueryRow())
	if perr == nil {
		if prev.RequestDigest == a.RequestDigest {
			return prev, true, true, nil
		}
		return ledger.Admission{}, false, true, fmt.Errorf("ledger: commit: %w", ledger.ErrKeyConflict)
	}
	if perr != nil && !errors.Is(perr, pgx.ErrNoRows) {
		return ledger.Admission{}, false, false, perr
	}
	if errors.Is(cerr, pgx.ErrNoRows) {
		return ledger.Admission{}, false, true, fmt.Errorf("ledger: commit: confirmation: %w", ledger.ErrNotFound)
	} else if cerr != nil {
		return ledger.Admission{}, false, false, cerr
	}
	if err := confirmationOutcome(c, a); err != nil && !errors.Is(err, ledger.ErrRevoked) {
		return ledger.Admission{}, false, true, err
	}
	return ledger.Admission{}, false, false, nil
}

// confirmationOutcome applies the bindings and the state of c to a (not
// revocations, which need the revocations table).
func confirmationOutcome(c ledger.Confirmation, a ledger.Admission) error {
	if err := ledger.CheckBindings(c, a); err != nil {
		return err
	}
	switch c.State {
	case ledger.ConfirmationAvailable:
		return nil
	case ledger.ConfirmationConsumed:
		return fmt.Errorf("ledger: commit: %w", ledger.ErrConfirmationConsumed)
	case ledger.ConfirmationExpired:
		return fmt.Errorf("ledger: commit: %w", ledger.ErrConfirmationExpired)
	}
	return fmt.Errorf("confirmation record in unknown state %q", c.State)
}

// bookingRuns returns the booking's runs not ended and not past live_until
// at t, and when it was released (zero if not).
func (s *Store) bookingRuns(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}, booking string, t time.Time) ([]ledger.RunRecord, time.Time, error) {
	var (
		released time.Time
		at       *time.Time
	)
	err := q.QueryRow(ctx, s.q.released, booking).Scan(&at)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, time.Time{}, err
	}
	if at != nil {
		released = *at
	}
	rows, err := q.Query(ctx, s.q.bookingRuns, booking, t)
	if err != nil {
		return nil, time.Time{}, err
	}
	runs, err := pgx.CollectRows(rows, scanRunRow)
	if err != nil {
		return nil, time.Time{}, err
	}
	if !released.IsZero() {
		released = released.UTC()
	}
	return runs, released, nil
}

func scanRunRow(row pgx.CollectableRow) (ledger.RunRecord, error) { return scanRun(row) }

func scanRun(row pgx.Row) (ledger.RunRecord, error) {
	var (
		r                 ledger.RunRecord
		endedAt           *time.Time
		endedBy           *string
		haltedAt, revoked *time.Time
		revocationKind    string
		reportDue, report *time.Time
	)
	err := row.Scan(&r.RunID, &r.Account, &r.BookingID, &r.ManifestDigest, &r.GPUs, &r.BookedGPUs,
		&r.AdmittedAt, &r.LiveUntil, &endedAt, &endedBy, &r.Stage,
		&r.EntitlementJTI, &r.Restarts, &r.LastCheckpointStep,
		&haltedAt, &r.Halt.DecisionID, &r.Halt.Stage, &r.Halt.ReportDigest, &r.Halt.FailedEvals, &r.Halt.By,
		&revoked, &revocationKind, &r.Revocation.Subject, &r.Revocation.By, &r.Revocation.Reason, &r.Revocation.DecisionID,
		&r.Plan.IntervalSteps, &r.Plan.Steps, &r.Plan.WallClockSeconds, &r.Plan.LostSecondsPerRestart,
		&r.Plan.CheckpointGiB, &r.Plan.StorageQuotaGiB,
		&reportDue, &report, &r.Report.DecisionID, &r.Report.Stage, &r.Report.ReportDigest, &r.Report.By)
	if err != nil {
		return ledger.RunRecord{}, err
	}
	if reportDue != nil {
		r.ReportDue = reportDue.UTC()
	}
	if report != nil {
		r.Report.At = report.UTC()
	}
	if haltedAt != nil {
		r.Halt.At = haltedAt.UTC()
	}
	if len(r.Halt.FailedEvals) == 0 {
		r.Halt.FailedEvals = nil
	}
	if revoked != nil {
		r.Revocation.At = revoked.UTC()
	}
	r.Revocation.Kind = ledger.RevocationKind(revocationKind)
	r.AdmittedAt, r.LiveUntil = r.AdmittedAt.UTC(), r.LiveUntil.UTC()
	if endedAt != nil {
		r.EndedAt = endedAt.UTC()
	}
	if endedBy != nil {
		r.EndedBy = api.Action(*endedBy)
	}
	return r, nil
}

func scanRevocationRow(row pgx.CollectableRow) (ledger.Revocation, error) { return scanRevocation(row) }

func scanRevocation(row pgx.Row) (ledger.Revocation, error) {
	var (
		r    ledger.Revocation
		kind string
	)
	if err := row.Scan(&kind, &r.Subject, &r.Reason, &r.RevokedBy, &r.RevokedAt, &r.ExpiresAt, &r.DecisionID); err != nil {
		return ledger.Revocation{}, err
	}
	r.Kind = ledger.RevocationKind(kind)
	r.RevokedAt, r.ExpiresAt = r.RevokedAt.UTC(), r.ExpiresAt.UTC()
	return r, nil
}

// RunRecord implements ledger.Store.
func (s *Store) RunRecord(ctx context.Context, runID string) (ledger.RunRecord, error) {
	var r ledger.RunRecord
	err := s.read(ctx, "run record", func(qctx context.Context, conn *txConn) (err error) {
		r, err = scanRun(conn.QueryRow(qctx, s.q.runRecord, runID))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.RunRecord{}, fmt.Errorf("ledger: run record: %w", ledger.ErrNotFound)
	}
	return r, err
}

// BookingUsage implements ledger.Store.
func (s *Store) BookingUsage(ctx context.Context, bookingID string, now time.Time) (ledger.BookingUsage, error) {
	var u ledger.BookingUsage
	err := s.read(ctx, "booking usage", func(qctx context.Context, conn *txConn) error {
		runs, released, err := s.bookingRuns(qctx, conn, bookingID, now)
		if err != nil {
			return err
		}
		u = ledger.Usage(bookingID, runs, released, now)
		var at *time.Time
		err = conn.QueryRow(qctx, s.q.booking, bookingID).Scan(&u.Account, &at)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	return u, err
}

// Revoke implements ledger.Store. One transaction (a pipelined batch):
// the lock of the booking a booking revocation names, or of the
// entitlement an entitlement revocation names (a create under it takes the
// same lock), then the revocation's insert and the revocation of the runs
// it covers (revokeRuns) with their events. Steps of those runs lock their
// row first, so each either commits before and is followed by the
// revocation, or waits and is refused.
func (s *Store) Revoke(ctx context.Context, r ledger.Revocation) (ledger.Revocation, bool, error) {
	if err := r.Validate(); err != nil {
		return ledger.Revocation{}, false, err
	}
	conn, err := s.acquire(ctx, "revoke")
	if err != nil {
		return ledger.Revocation{}, false, err
	}
	defer conn.Release()
	qctx, cancel := s.bound(ctx, 3)
	defer cancel()
	b := &pgx.Batch{}
	locked := r.Kind.RevokesRuns()
	switch r.Kind {
	case ledger.RevokeBooking:
		key := bookingLockKey(s.opts.Schema, r.Subject)
		b.Queue(s.q.lockBooking, key, key)
	case ledger.RevokeEntitlement:
		key := entitlementLockKey(s.opts.Schema, r.Subject)
		b.Queue(s.q.lockBooking, key, key)
	}
	b.Queue(s.q.revoke, string(r.Kind), r.Subject, r.Reason, r.RevokedBy, r.RevokedAt.UTC(), r.ExpiresAt.UTC(), r.DecisionID)
	if locked {
		b.Queue(s.q.revokeRuns, string(r.Kind), r.Subject, r.RevokedAt.UTC())
	}
	b.Queue(s.q.revoked, string(r.Kind), r.Subject)
	br := conn.SendBatch(qctx, b)
	var tag pgconn.CommandTag
	if locked {
		_, err = br.Exec()
	}
	if err == nil {
		tag, err = br.Exec()
	}
	if err == nil && locked {
		_, err = br.Exec()
	}
	var stored ledger.Revocation
	if err == nil {
		stored, err = scanRevocation(br.QueryRow())
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ledger.Revocation{}, false, s.fault(ctx, "revoke", err)
	}
	return stored, tag.RowsAffected() == 1, nil
}

// Revoked implements ledger.Store.
func (s *Store) Revoked(ctx context.Context, kind ledger.RevocationKind, subject string) (ledger.Revocation, error) {
	var r ledger.Revocation
	err := s.read(ctx, "revoked", func(qctx context.Context, conn *txConn) (err error) {
		r, err = scanRevocation(conn.QueryRow(qctx, s.q.revoked, string(kind), subject))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return ledger.Revocation{}, fmt.Errorf("ledger: revoked: %w", ledger.ErrNotFound)
	}
	return r, err
}

// checkRunLife is Check's part for runs, in the same snapshot: every
// train.create admission has its run, and no booking ever held more GPUs
// than it booked (ledger.CheckHeld, with the events that set the runs'
// GPUs).
func (s *Store) checkRunLife(ctx context.Context, tx pgx.Tx, r *strings.Replacer) ([]string, error) {
	var problems []string
	rows, err := tx.Query(ctx, r.Replace(`
		SELECT 'run ' || a.run_id || ' has no run record' FROM {s}.admissions a
		WHERE a.state = 'admitted' AND NOT EXISTS (SELECT 1 FROM {s}.runs r WHERE r.run_id = a.run_id)
		UNION ALL
		SELECT 'run record ' || r.run_id || ' has no train.create admission' FROM {s}.runs r
		WHERE NOT EXISTS (SELECT 1 FROM {s}.admissions a WHERE a.run_id = r.run_id AND a.state = 'admitted')
		LIMIT 20`))
	if err != nil {
		return nil, err
	}
	p, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	problems = append(problems, p...)
	rows, err = tx.Query(ctx, r.Replace(`SELECT `+runCols+` FROM {s}.runs ORDER BY booking_id`))
	if err != nil {
		return nil, err
	}
	runs, err := pgx.CollectRows(rows, scanRunRow)
	if err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, r.Replace(`SELECT `+eventCols+` FROM {s}.run_events WHERE gpus > 0 ORDER BY run_id, id`))
	if err != nil {
		return nil, err
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, err
	}
	gpuEvents := map[string][]ledger.RunEvent{}
	for _, e := range events {
		gpuEvents[e.RunID] = append(gpuEvents[e.RunID], e)
	}
	byBooking := map[string][]ledger.RunRecord{}
	for _, run := range runs {
		byBooking[run.BookingID] = append(byBooking[run.BookingID], run)
	}
	for booking, rs := range byBooking {
		for _, p := range ledger.CheckHeld(rs, gpuEvents) {
			problems = append(problems, "booking "+booking+": "+p)
		}
	}
	return problems, nil
}
