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

// workloadQueries are the statements of the Workloads methods (migrations
// 0003, 0011 and 0015), qualified with the schema.
type workloadQueries struct {
	insertBinding, binding, lockBinding, setActive, insertUID, uids, charges, putCharge string
}

func newWorkloadQueries(schema string) workloadQueries {
	r := strings.NewReplacer("{s}", schema, "{rcols}", runCols)
	return workloadQueries{
		insertBinding: r.Replace(`INSERT INTO {s}.workload_bindings (run_id, identity, bound_at) VALUES ($1, $2, $3) ON CONFLICT (run_id) DO NOTHING`),
		binding:       r.Replace(`SELECT identity, bound_at, active_uid FROM {s}.workload_bindings WHERE run_id = $1`),
		lockBinding:   r.Replace(`SELECT identity, bound_at, active_uid FROM {s}.workload_bindings WHERE run_id = $1 FOR UPDATE`),
		setActive:     r.Replace(`UPDATE {s}.workload_bindings SET active_uid = $2 WHERE run_id = $1`),
		insertUID:     r.Replace(`INSERT INTO {s}.workload_uids (run_id, uid, added_at, root_uid) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`),
		uids:          r.Replace(`SELECT uid, root_uid FROM {s}.workload_uids WHERE run_id = $1 ORDER BY seq`),
		charges:       r.Replace(`SELECT owner_uid, name, uid, gpus FROM {s}.workload_charges WHERE run_id = $1 ORDER BY seq`),
		// A charge taken over or raised keeps its place (seq).
		putCharge: r.Replace(`INSERT INTO {s}.workload_charges (run_id, owner_uid, name, uid, gpus, charged_at) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (run_id, owner_uid, name) DO UPDATE SET uid = EXCLUDED.uid, gpus = EXCLUDED.gpus, charged_at = EXCLUDED.charged_at`),
	}
}

// BindWorkload implements ledger.Workloads: ledger.Step in one runTx (the
// run's row read FOR SHARE must allow work when the step writes). A root's
// binding row is inserted if absent; the binding row is then locked, so two
// replicas binding one run serialize on it and the second sees the first's
// identity, active root and charges (two children of one owner charged at
// once serialize there too, each against the run's gpus as its transaction
// reads them). A step that writes then takes the run's sink lock
// (lockRunSinks) and is refused when the run started a scheduler job.
func (s *Store) BindWorkload(ctx context.Context, b ledger.WorkloadBind) (ledger.WorkloadBinding, error) {
	if err := b.Validate(); err != nil {
		return ledger.WorkloadBinding{}, err
	}
	at := b.At.UTC().Truncate(time.Microsecond)
	var out ledger.WorkloadBinding
	refused, fault := s.runTx(ctx, "bind workload", 10, b.RunID, func(qctx context.Context, tx pgx.Tx, run ledger.RunRecord) error {
		if b.OwnerUID == "" {
			if _, err := tx.Exec(qctx, s.wq.insertBinding, b.RunID, b.Identity, at); err != nil {
				return err
			}
		}
		cur := ledger.WorkloadBinding{RunID: b.RunID}
		found := true
		err := tx.QueryRow(qctx, s.wq.lockBinding, b.RunID).Scan(&cur.Identity, &cur.BoundAt, &cur.Active)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			found = false
		case err != nil:
			return err
		default:
			cur.BoundAt = cur.BoundAt.UTC()
			if cur.UIDs, cur.Roots, err = s.workloadUIDs(qctx, tx, b.RunID); err != nil {
				return err
			}
			if cur.Charges, err = s.workloadCharges(qctx, tx, b.RunID); err != nil {
				return err
			}
		}
		// The row a root inserted above is the binding Step would create:
		// read back, it is found with no uids yet.
		step, err := ledger.Step(cur, found, b, run.GPUs)
		if err != nil {
			out = step.Binding
			return refuse(err)
		}
		out = step.Binding
		if step.Writes() {
			if err := run.MayWork(b.At); err != nil {
				out = ledger.WorkloadBinding{}
				return refuse(fmt.Errorf("ledger: bind workload: %w", err))
			}
			if err := s.lockRunSinks(qctx, tx, b.RunID); err != nil {
				return err
			}
			j := ledger.JobBinding{RunID: b.RunID}
			switch err := tx.QueryRow(qctx, s.jq.binding, b.RunID).Scan(&j.Scheduler, &j.JobID, &j.BoundAt); {
			case err == nil:
				out, j.BoundAt = ledger.WorkloadBinding{}, j.BoundAt.UTC()
				return refuse(&ledger.SinkBoundError{Job: &j})
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
		}
		if step.Activate {
			if _, err := tx.Exec(qctx, s.wq.setActive, b.RunID, out.Active); err != nil {
				return err
			}
		}
		if step.AddUID != "" {
			if _, err := tx.Exec(qctx, s.wq.insertUID, b.RunID, step.AddUID, at, step.AddRoot); err != nil {
				return err
			}
		}
		if c := step.Charge; c != nil {
			if _, err := tx.Exec(qctx, s.wq.putCharge, b.RunID, c.OwnerUID, c.Name, c.UID, c.GPUs, at); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case refused != nil:
		if errors.Is(refused, ledger.ErrWorkloadBound) && b.OwnerUID == "" {
			return out, refused
		}
		return ledger.WorkloadBinding{}, refused
	case fault != nil:
		return ledger.WorkloadBinding{}, fault
	}
	return out, nil
}

// workloadUIDs reads a binding's uids in order and the root of each.
func (s *Store) workloadUIDs(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, runID string) ([]string, map[string]string, error) {
	rows, err := q.Query(ctx, s.wq.uids, runID)
	if err != nil {
		return nil, nil, err
	}
	type row struct{ UID, Root string }
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.UID, &x.Root)
		return x, err
	})
	if err != nil {
		return nil, nil, err
	}
	uids := make([]string, len(rs))
	roots := make(map[string]string, len(rs))
	for i, x := range rs {
		uids[i], roots[x.UID] = x.UID, x.Root
	}
	return uids, roots, nil
}

// workloadCharges reads a binding's charges in order.
func (s *Store) workloadCharges(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, runID string) ([]ledger.WorkloadCharge, error) {
	rows, err := q.Query(ctx, s.wq.charges, runID)
	if err != nil {
		return nil, err
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ledger.WorkloadCharge, error) {
		var c ledger.WorkloadCharge
		err := r.Scan(&c.OwnerUID, &c.Name, &c.UID, &c.GPUs)
		return c, err
	})
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	return cs, nil
}

// WorkloadBinding implements ledger.Workloads.
func (s *Store) WorkloadBinding(ctx context.Context, runID string) (ledger.WorkloadBinding, error) {
	out := ledger.WorkloadBinding{RunID: runID}
	err := s.read(ctx, "workload binding", func(qctx context.Context, conn *txConn) error {
		if err := conn.QueryRow(qctx, s.wq.binding, runID).Scan(&out.Identity, &out.BoundAt, &out.Active); err != nil {
			return err
		}
		out.BoundAt = out.BoundAt.UTC()
		var err error
		if out.UIDs, out.Roots, err = s.workloadUIDs(qctx, conn, runID); err != nil {
			return err
		}
		out.Charges, err = s.workloadCharges(qctx, conn, runID)
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ledger.WorkloadBinding{}, fmt.Errorf("ledger: workload binding: %w", ledger.ErrNotFound)
	case err != nil:
		return ledger.WorkloadBinding{}, err
	}
	return out, nil
}
