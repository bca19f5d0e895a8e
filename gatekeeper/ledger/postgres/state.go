package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// The run's state machine: halts, events, and Check's part for them.

// HaltRun implements ledger.Store: one transaction (a pipelined batch)
// takes the booking's lock, so it serializes with the commits on the
// booking, and halts the run only if it passes ledger.CheckHalt (the
// statement's WHERE), writing its event. When nothing was written, a read
// of the run says why (ledger.CheckHalt again): states only move forward.
func (s *Store) HaltRun(ctx context.Context, h ledger.Halt) (ledger.RunRecord, bool, error) {
	if err := h.Validate(); err != nil {
		return ledger.RunRecord{}, false, err
	}
	return s.runTransition(ctx, "halt", h.BookingID, h.RunID, s.q.halt, []any{h.RunID, h.At.UTC(), h.DecisionID,
		h.Stage, h.ReportDigest, h.FailedEvals, h.By, h.Account, h.BookingID, ledger.HaltEvent(h).Reason},
		func(run ledger.RunRecord) (bool, error) { return ledger.CheckHalt(run, h) })
}

// RecordReport implements ledger.Store as HaltRun does: one transaction
// (a pipelined batch) takes the booking's lock and records the report only
// if the run passes ledger.CheckRecordReport (the statement's WHERE),
// writing its event; when nothing was written, a read of the run says why.
func (s *Store) RecordReport(ctx context.Context, p ledger.Report) (ledger.RunRecord, bool, error) {
	if err := p.Validate(); err != nil {
		return ledger.RunRecord{}, false, err
	}
	return s.runTransition(ctx, "report", p.BookingID, p.RunID, s.q.report, []any{p.RunID, p.At.UTC(), p.DecisionID,
		p.Stage, p.ReportDigest, p.By, p.Account, p.BookingID, ledger.ReportEvent(p).Reason},
		func(run ledger.RunRecord) (bool, error) { return ledger.CheckRecordReport(run, p) })
}

// runTransition is one guarded transition of a run (op names it in
// errors): a pipelined batch that takes the booking's lock, runs stmt with
// args — an UPDATE whose WHERE is check's condition, writing the run and
// its event — and reads the run back. Written: the run as stored and
// true. Nothing written: check on the run read says why (its error, e.g.
// ledger.ErrRunEnded) or, when check passes, the statement and check
// disagree, a fault; otherwise the run and false (already in that state).
func (s *Store) runTransition(ctx context.Context, op, bookingID, runID, stmt string, args []any,
	check func(ledger.RunRecord) (bool, error)) (ledger.RunRecord, bool, error) {
	conn, err := s.acquire(ctx, op)
	if err != nil {
		return ledger.RunRecord{}, false, err
	}
	defer conn.Release()
	qctx, cancel := s.bound(ctx, 2)
	defer cancel()
	key := bookingLockKey(s.opts.Schema, bookingID)
	b := &pgx.Batch{}
	b.Queue(s.q.lockBooking, key, key)
	b.Queue(stmt, args...)
	b.Queue(s.q.runRecord, runID)
	br := conn.SendBatch(qctx, b)
	var tag pgconn.CommandTag
	_, err = br.Exec()
	if err == nil {
		tag, err = br.Exec()
	}
	run, rerr := scanRun(br.QueryRow())
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return ledger.RunRecord{}, false, s.fault(ctx, op, err)
	case errors.Is(rerr, pgx.ErrNoRows):
		return ledger.RunRecord{}, false, fmt.Errorf("ledger: %s: run: %w", op, ledger.ErrNotFound)
	case rerr != nil:
		return ledger.RunRecord{}, false, s.fault(ctx, op, rerr)
	case tag.RowsAffected() == 1:
		return run, true, nil
	}
	would, err := check(run)
	switch {
	case err != nil:
		return ledger.RunRecord{}, false, err
	case would:
		// The statement's WHERE and the check disagree: a bug, not an
		// outcome.
		return ledger.RunRecord{}, false, s.fault(ctx, op, errors.New("the run passes the check, yet the statement wrote nothing"))
	}
	return run, false, nil
}

// RunEvents implements ledger.Store.
func (s *Store) RunEvents(ctx context.Context, runID string) ([]ledger.RunEvent, error) {
	var out []ledger.RunEvent
	err := s.read(ctx, "run events", func(qctx context.Context, conn *txConn) error {
		rows, err := conn.Query(qctx, s.q.runEvents, runID, ledger.MaxRunEvents)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scanEvent)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Runs implements ledger.Store.
func (s *Store) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, bool, error) {
	if err := q.Validate(); err != nil {
		return nil, false, err
	}
	var out []ledger.RunRecord
	err := s.read(ctx, "runs", func(qctx context.Context, conn *txConn) error {
		rows, err := conn.Query(qctx, s.q.runs, q.Account, q.BookingID, q.After, q.Limit+1)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, scanRunRow)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if len(out) > q.Limit {
		return out[:q.Limit], true, nil
	}
	return out, false, nil
}

func scanEvent(row pgx.CollectableRow) (ledger.RunEvent, error) {
	var (
		e          ledger.RunEvent
		to, action string
	)
	var due *time.Time
	err := row.Scan(&e.RunID, &e.At, &to, &action, &e.DecisionID, &e.By, &e.Reason, &e.Stage, &e.CheckpointStep, &due,
		&e.GPUs)
	e.At, e.To, e.Action = e.At.UTC(), api.RunState(to), api.Action(action)
	if due != nil {
		e.ReportDue = due.UTC()
	}
	return e, err
}

// timeOrNil is t for a nullable timestamptz: nil when zero.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// checkRunEvents is Check's part for the run's state machine, in Check's
// snapshot: every run's events replay to its record (ledger.CheckEvents),
// every admission on a run has its event, every booking an admission names
// is bound to an account.
func (s *Store) checkRunEvents(ctx context.Context, tx pgx.Tx, r *strings.Replacer) ([]string, error) {
	rows, err := tx.Query(ctx, r.Replace(`
		SELECT 'admission (' || a.account || ', ' || a.idempotency_key || ') on run ' || a.run_id || ' has no event'
		FROM {s}.admissions a
		WHERE a.state IN ('admitted', 'stage_advanced', 'restart_admitted', 'cancel_admitted', 'cleanup_admitted')
			AND EXISTS (SELECT 1 FROM {s}.runs u WHERE u.run_id = a.run_id)
			AND NOT EXISTS (SELECT 1 FROM {s}.run_events e WHERE e.run_id = a.run_id AND e.decision_id = a.decision_id)
		UNION ALL
		SELECT 'booking ' || a.booking_id || ' of admission (' || a.account || ', ' || a.idempotency_key || ') is bound to no account'
		FROM {s}.admissions a WHERE NOT EXISTS (SELECT 1 FROM {s}.bookings b WHERE b.booking_id = a.booking_id)
		LIMIT 20`))
	if err != nil {
		return nil, err
	}
	problems, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, r.Replace(`SELECT `+runCols+` FROM {s}.runs ORDER BY run_id`))
	if err != nil {
		return nil, err
	}
	runs, err := pgx.CollectRows(rows, scanRunRow)
	if err != nil {
		return nil, err
	}
	rows, err = tx.Query(ctx, r.Replace(`SELECT `+eventCols+` FROM {s}.run_events ORDER BY run_id, id`))
	if err != nil {
		return nil, err
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, err
	}
	byRun := map[string][]ledger.RunEvent{}
	for _, e := range events {
		byRun[e.RunID] = append(byRun[e.RunID], e)
	}
	for _, run := range runs {
		problems = append(problems, ledger.CheckEvents(run, byRun[run.RunID])...)
	}
	return problems, nil
}
