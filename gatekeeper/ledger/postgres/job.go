package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// jobQueries are the statements of the Jobs methods (migration 0010),
// qualified with the schema.
type jobQueries struct {
	binding, lockBinding, insert string
}

func newJobQueries(schema string) jobQueries {
	r := strings.NewReplacer("{s}", schema, "{rcols}", runCols)
	return jobQueries{
		binding:     r.Replace(`SELECT scheduler, job_id, bound_at FROM {s}.run_jobs WHERE run_id = $1`),
		lockBinding: r.Replace(`SELECT scheduler, job_id, bound_at FROM {s}.run_jobs WHERE run_id = $1 FOR UPDATE`),
		insert: r.Replace(`INSERT INTO {s}.run_jobs (run_id, scheduler, job_id, bound_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (run_id) DO NOTHING`),
	}
}

// BindJob implements ledger.Jobs in one runTx (the run's row read FOR
// SHARE, so a transition of the run either commits before the bind, which
// then sees it, or waits for it). Under the run's sink lock
// (lockRunSinks), a run with no job binding yet is refused when its ticket
// created a Kubernetes workload; otherwise the binding row is inserted if
// absent and then locked, so two replicas binding one run serialize on it
// and the second sees the first's job.
func (s *Store) BindJob(ctx context.Context, b ledger.JobBind) (ledger.JobBinding, error) {
	if err := b.Validate(); err != nil {
		return ledger.JobBinding{}, err
	}
	at := b.At.UTC().Truncate(time.Microsecond)
	var out ledger.JobBinding
	refused, fault := s.runTx(ctx, "bind job", 7, b.RunID, func(qctx context.Context, tx pgx.Tx, run ledger.RunRecord) error {
		// A run that may not work binds nothing, bound or not.
		if err := run.MayWork(b.At); err != nil {
			return refuse(err)
		}
		if err := s.lockRunSinks(qctx, tx, b.RunID); err != nil {
			return err
		}
		var cur ledger.JobBinding
		switch err := tx.QueryRow(qctx, s.jq.binding, b.RunID).Scan(&cur.Scheduler, &cur.JobID, &cur.BoundAt); {
		case errors.Is(err, pgx.ErrNoRows):
			// A first job: not when the run's ticket created a workload.
			w := ledger.WorkloadBinding{RunID: b.RunID}
			err := tx.QueryRow(qctx, s.wq.binding, b.RunID).Scan(&w.Identity, &w.BoundAt, &w.Active)
			switch {
			case err == nil:
				w.BoundAt = w.BoundAt.UTC()
				return refuse(&ledger.SinkBoundError{Workload: &w})
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
		case err != nil:
			return err
		}
		if _, err := tx.Exec(qctx, s.jq.insert, b.RunID, b.Scheduler, b.JobID, at); err != nil {
			return err
		}
		out = ledger.JobBinding{RunID: b.RunID}
		if err := tx.QueryRow(qctx, s.jq.lockBinding, b.RunID).Scan(&out.Scheduler, &out.JobID, &out.BoundAt); err != nil {
			return err
		}
		out.BoundAt = out.BoundAt.UTC()
		// The row is now this bind's or an earlier one's: CheckJob on it
		// as it was before (bound) says whether this bind is the same job.
		if _, err := ledger.CheckJob(run, true, out, b); err != nil {
			return refuse(err)
		}
		return nil
	})
	switch {
	case errors.As(refused, new(*ledger.SinkBoundError)):
		return ledger.JobBinding{}, refused
	case errors.Is(refused, ledger.ErrJobBound):
		return out, refused
	case refused != nil:
		return ledger.JobBinding{}, refused
	case fault != nil:
		return ledger.JobBinding{}, fault
	}
	return out, nil
}

// JobBinding implements ledger.Jobs.
func (s *Store) JobBinding(ctx context.Context, runID string) (ledger.JobBinding, error) {
	out := ledger.JobBinding{RunID: runID}
	err := s.read(ctx, "job binding", func(qctx context.Context, conn *txConn) error {
		return conn.QueryRow(qctx, s.jq.binding, runID).Scan(&out.Scheduler, &out.JobID, &out.BoundAt)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ledger.JobBinding{}, fmt.Errorf("ledger: job binding: %w", ledger.ErrNotFound)
	case err != nil:
		return ledger.JobBinding{}, err
	}
	out.BoundAt = out.BoundAt.UTC()
	return out, nil
}
