package bolt

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

type workloadRecord struct {
	Identity string    `json:"identity"`
	UIDs     []string  `json:"uids"`
	BoundAt  time.Time `json:"bound_at"`
}

func (r workloadRecord) binding(runID string) ledger.WorkloadBinding {
	return ledger.WorkloadBinding{RunID: runID, Identity: r.Identity, UIDs: slices.Clone(r.UIDs), BoundAt: r.BoundAt.UTC()}
}

// BindWorkload implements ledger.Workloads.
func (s *Store) BindWorkload(ctx context.Context, b ledger.WorkloadBind) (ledger.WorkloadBinding, error) {
	if err := b.Validate(); err != nil {
		return ledger.WorkloadBinding{}, err
	}
	var out ledger.WorkloadBinding
	err := s.write(ctx, "bind workload", s.db.Update, func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketRuns).Get([]byte(b.RunID)) == nil {
			return abort(fmt.Errorf("ledger: bind workload: run: %w", ledger.ErrNotFound))
		}
		bucket := tx.Bucket(bucketWorkloads)
		var rec workloadRecord
		if v := bucket.Get([]byte(b.RunID)); v != nil {
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("corrupt workload record: %w", err)
			}
		}
		switch {
		case b.OwnerUID != "" && !slices.Contains(rec.UIDs, b.OwnerUID):
			return abort(fmt.Errorf("ledger: bind workload: %w", ledger.ErrWorkloadOwnerUnbound))
		case b.OwnerUID == "" && rec.Identity != "" && rec.Identity != b.Identity:
			out = rec.binding(b.RunID)
			return abort(fmt.Errorf("ledger: bind workload: %w", ledger.ErrWorkloadBound))
		case rec.Identity == "":
			rec = workloadRecord{Identity: b.Identity, BoundAt: b.At.UTC().Truncate(time.Microsecond)}
		}
		if !slices.Contains(rec.UIDs, b.UID) {
			if len(rec.UIDs) >= ledger.MaxWorkloadUIDs {
				return abort(fmt.Errorf("ledger: bind workload: more than %d uids: %w", ledger.MaxWorkloadUIDs, ledger.ErrInvalid))
			}
			rec.UIDs = append(rec.UIDs, b.UID)
		}
		v, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		out = rec.binding(b.RunID)
		return bucket.Put([]byte(b.RunID), v)
	})
	if err != nil {
		return out, err
	}
	return out, nil
}

// WorkloadBinding implements ledger.Workloads.
func (s *Store) WorkloadBinding(ctx context.Context, runID string) (ledger.WorkloadBinding, error) {
	var out ledger.WorkloadBinding
	err := s.read(ctx, "workload binding", func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketWorkloads).Get([]byte(runID))
		if v == nil {
			return abort(fmt.Errorf("ledger: workload binding: %w", ledger.ErrNotFound))
		}
		var rec workloadRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("corrupt workload record: %w", err)
		}
		out = rec.binding(runID)
		return nil
	})
	if err != nil {
		return ledger.WorkloadBinding{}, err
	}
	return out, nil
}
