package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// runForShareQuery reads a run's row FOR SHARE (see runTx).
func runForShareQuery(schema string) string {
	return strings.NewReplacer("{s}", schema, "{rcols}", runCols).
		Replace(`SELECT {rcols} FROM {s}.runs WHERE run_id = $1 FOR SHARE`)
}

// refusal marks an error of a runTx body as the ledger refusing the
// operation (a domain error: the transaction rolls back, nothing is
// written) rather than the database failing.
type refusal struct{ err error }

func (r refusal) Error() string { return r.err.Error() }

// refuse returns err as a refusal, for a runTx body to return.
func refuse(err error) error { return refusal{err} }

// runTx runs body in one READ COMMITTED transaction of at most stmts
// statements' time, after reading runID's row FOR SHARE: a transition of
// the run (a cancel, a revocation, a halt: each an UPDATE of its row)
// either commits first, and body sees it, or waits for this transaction.
//
// A missing run is refused with ledger.ErrNotFound. It returns the body's
// refusal as refused, unwrapped; any other failure as fault (s.fault: the
// caller's ctx error, or ledger.ErrUnavailable). At most one is non-nil.
func (s *Store) runTx(ctx context.Context, op string, stmts int, runID string,
	body func(ctx context.Context, tx pgx.Tx, run ledger.RunRecord) error) (refused, fault error) {
	conn, err := s.acquire(ctx, op)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	qctx, cancel := s.bound(ctx, stmts)
	defer cancel()
	err = pgx.BeginFunc(qctx, conn, func(tx pgx.Tx) error {
		run, err := scanRun(tx.QueryRow(qctx, s.runForShare, runID))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return refuse(fmt.Errorf("ledger: %s: run: %w", op, ledger.ErrNotFound))
		case err != nil:
			return err
		}
		return body(qctx, tx, run)
	})
	if r, ok := errors.AsType[refusal](err); ok {
		return r.err, nil
	}
	if err != nil {
		return nil, s.fault(ctx, op, err)
	}
	return nil, nil
}
