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

// workloadQueries are the statements of the Workloads methods (migration
// 0003), qualified with the schema.
type workloadQueries struct {
	runExists, insertBinding, binding, lockBinding, hasUID, countUIDs, insertUID, uids string
}

func newWorkloadQueries(schema string) workloadQueries {
	r := strings.NewReplacer("{s}", schema)
	return workloadQueries{
		runExists:     r.Replace(`SELECT EXISTS (SELECT 1 FROM {s}.admissions WHERE run_id = $1 AND state = 'admitted')`),
		insertBinding: r.Replace(`INSERT INTO {s}.workload_bindings (run_id, identity, bound_at) VALUES ($1, $2, $3) ON CONFLICT (run_id) DO NOTHING`),
		binding:       r.Replace(`SELECT identity, bound_at FROM {s}.workload_bindings WHERE run_id = $1`),
		lockBinding:   r.Replace(`SELECT identity, bound_at FROM {s}.workload_bindings WHERE run_id = $1 FOR UPDATE`),
		hasUID:        r.Replace(`SELECT EXISTS (SELECT 1 FROM {s}.workload_uids WHERE run_id = $1 AND uid = $2)`),
		countUIDs:     r.Replace(`SELECT count(*) FROM {s}.workload_uids WHERE run_id = $1`),
		insertUID:     r.Replace(`INSERT INTO {s}.workload_uids (run_id, uid, added_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`),
		uids:          r.Replace(`SELECT uid FROM {s}.workload_uids WHERE run_id = $1 ORDER BY seq`),
	}
}

// BindWorkload implements ledger.Workloads in one READ COMMITTED
// transaction: the binding row is inserted if absent and then locked, so
// two replicas binding one run serialize on it and the second sees the
// first's identity.
func (s *Store) BindWorkload(ctx context.Context, b ledger.WorkloadBind) (ledger.WorkloadBinding, error) {
	if err := b.Validate(); err != nil {
		return ledger.WorkloadBinding{}, err
	}
	conn, err := s.acquire(ctx, "bind workload")
	if err != nil {
		return ledger.WorkloadBinding{}, err
	}
	defer conn.Release()
	qctx, cancel := s.bound(ctx, 8)
	defer cancel()
	at := b.At.UTC().Truncate(time.Microsecond)
	var out ledger.WorkloadBinding
	var domain error // a refusal: the transaction rolls back, nothing written
	err = pgx.BeginFunc(qctx, conn, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(qctx, s.wq.runExists, b.RunID).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			domain = fmt.Errorf("ledger: bind workload: run: %w", ledger.ErrNotFound)
			return domain
		}
		if b.OwnerUID == "" {
			if _, err := tx.Exec(qctx, s.wq.insertBinding, b.RunID, b.Identity, at); err != nil {
				return err
			}
		}
		out = ledger.WorkloadBinding{RunID: b.RunID}
		err := tx.QueryRow(qctx, s.wq.lockBinding, b.RunID).Scan(&out.Identity, &out.BoundAt)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			domain = fmt.Errorf("ledger: bind workload: %w", ledger.ErrWorkloadOwnerUnbound)
			return domain
		case err != nil:
			return err
		}
		out.BoundAt = out.BoundAt.UTC()
		if out.UIDs, err = s.workloadUIDs(qctx, tx, b.RunID); err != nil {
			return err
		}
		switch {
		case b.OwnerUID == "" && out.Identity != b.Identity:
			domain = fmt.Errorf("ledger: bind workload: %w", ledger.ErrWorkloadBound)
			return domain
		case b.OwnerUID != "" && !out.HasUID(b.OwnerUID):
			domain = fmt.Errorf("ledger: bind workload: %w", ledger.ErrWorkloadOwnerUnbound)
			return domain
		case out.HasUID(b.UID):
			return nil
		case len(out.UIDs) >= ledger.MaxWorkloadUIDs:
			domain = fmt.Errorf("ledger: bind workload: more than %d uids: %w", ledger.MaxWorkloadUIDs, ledger.ErrInvalid)
			return domain
		}
		if _, err := tx.Exec(qctx, s.wq.insertUID, b.RunID, b.UID, at); err != nil {
			return err
		}
		out.UIDs = append(out.UIDs, b.UID)
		return nil
	})
	switch {
	case domain != nil:
		if errors.Is(domain, ledger.ErrWorkloadBound) {
			return out, domain
		}
		return ledger.WorkloadBinding{}, domain
	case err != nil:
		return ledger.WorkloadBinding{}, s.fault(ctx, "bind workload", err)
	}
	return out, nil
}

func (s *Store) workloadUIDs(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, runID string) ([]string, error) {
	rows, err := q.Query(ctx, s.wq.uids, runID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// WorkloadBinding implements ledger.Workloads.
func (s *Store) WorkloadBinding(ctx context.Context, runID string) (ledger.WorkloadBinding, error) {
	out := ledger.WorkloadBinding{RunID: runID}
	err := s.read(ctx, "workload binding", func(qctx context.Context, conn *txConn) error {
		var id string
		var at time.Time
		if err := conn.QueryRow(qctx, s.wq.binding, runID).Scan(&id, &at); err != nil {
			return err
		}
		uids, err := s.workloadUIDs(qctx, conn, runID)
		if err != nil {
			return err
		}
		out.Identity, out.BoundAt, out.UIDs = id, at.UTC(), uids
		return nil
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ledger.WorkloadBinding{}, fmt.Errorf("ledger: workload binding: %w", ledger.ErrNotFound)
	case err != nil:
		return ledger.WorkloadBinding{}, err
	}
	return out, nil
}
