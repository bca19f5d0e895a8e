package bolt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// workloadRecord is a run's binding. Roots and Active were added with
// the active root (issue 22); a record without them reads as every uid
// under the first (ledger.WorkloadBinding.RootOf) and no active root.
// Charges were added in schema 8; a record without them charges nothing.
type workloadRecord struct {
	Identity string            `json:"identity"`
	UIDs     []string          `json:"uids"`
	Roots    map[string]string `json:"roots,omitempty"`
	Active   string            `json:"active,omitempty"`
	Charges  []chargeRecord    `json:"charges,omitempty"`
	BoundAt  time.Time         `json:"bound_at"`
}

// chargeRecord is a ledger.WorkloadCharge.
type chargeRecord struct {
	Owner string `json:"owner"`
	Name  string `json:"name"`
	UID   string `json:"uid"`
	GPUs  int    `json:"gpus"`
}

func (r workloadRecord) binding(runID string) ledger.WorkloadBinding {
	roots := make(map[string]string, len(r.UIDs))
	w := ledger.WorkloadBinding{RunID: runID, Identity: r.Identity, UIDs: slices.Clone(r.UIDs), Roots: r.Roots,
		Active: r.Active, BoundAt: r.BoundAt.UTC()}
	for _, u := range r.UIDs {
		roots[u] = w.RootOf(u)
	}
	w.Roots = roots
	for _, c := range r.Charges {
		w.Charges = append(w.Charges, ledger.WorkloadCharge{OwnerUID: c.Owner, Name: c.Name, UID: c.UID, GPUs: c.GPUs})
	}
	return w
}

func newWorkloadRecord(w ledger.WorkloadBinding) workloadRecord {
	r := workloadRecord{Identity: w.Identity, UIDs: w.UIDs, Roots: w.Roots, Active: w.Active, BoundAt: w.BoundAt}
	for _, c := range w.Charges {
		r.Charges = append(r.Charges, chargeRecord{Owner: c.OwnerUID, Name: c.Name, UID: c.UID, GPUs: c.GPUs})
	}
	return r
}

// BindWorkload implements ledger.Workloads: ledger.Step in one bbolt
// write transaction (a child charged against the run record's GPUs), after
// the run's record says it may take work. The single writer serializes
// two children of one owner charged at once.
func (s *Store) BindWorkload(ctx context.Context, b ledger.WorkloadBind) (ledger.WorkloadBinding, error) {
	if err := b.Validate(); err != nil {
		return ledger.WorkloadBinding{}, err
	}
	var out ledger.WorkloadBinding
	err := s.write(ctx, "bind workload", s.db.Update, func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketRuns).Get([]byte(b.RunID)) == nil || tx.Bucket(bucketRunRecs).Get([]byte(b.RunID)) == nil {
			return abort(fmt.Errorf("ledger: bind workload: run: %w", ledger.ErrNotFound))
		}
		run, err := getRun(tx.Bucket(bucketRunRecs), b.RunID)
		if err != nil {
			return err
		}
		bucket := tx.Bucket(bucketWorkloads)
		var rec workloadRecord
		v := bucket.Get([]byte(b.RunID))
		if v != nil {
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("corrupt workload record: %w", err)
			}
		}
		step, err := ledger.Step(rec.binding(b.RunID), v != nil, b, run.GPUs)
		if err != nil {
			if errors.Is(err, ledger.ErrWorkloadBound) && b.OwnerUID == "" {
				out = step.Binding
			}
			return abort(err)
		}
		out = step.Binding
		if !step.Writes() {
			return nil
		}
		if err := run.run().MayWork(b.At); err != nil {
			out = ledger.WorkloadBinding{}
			return abort(fmt.Errorf("ledger: bind workload: %w", err))
		}
		// One sink per run: the single writer serializes this with the
		// run's job binds.
		if job, bound, err := getJob(tx, b.RunID); err != nil {
			return err
		} else if bound {
			out = ledger.WorkloadBinding{}
			j := job.binding(b.RunID)
			return abort(&ledger.SinkBoundError{Job: &j})
		}
		raw, err := json.Marshal(newWorkloadRecord(out))
		if err != nil {
			return err
		}
		return bucket.Put([]byte(b.RunID), raw)
	})
	if err != nil {
		return out, err
	}
	return out, nil
}

// checkCharges asks ledger.CheckCharges of every binding, against its
// run's GPUs (for Check).
func checkCharges(tx *bbolt.Tx, bad func(string, ...any)) error {
	recs := tx.Bucket(bucketRunRecs)
	return tx.Bucket(bucketWorkloads).ForEach(func(k, v []byte) error {
		var rec workloadRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			bad("workload binding %s: %v", k, err)
			return nil
		}
		if len(rec.Charges) == 0 {
			return nil
		}
		run, err := getRun(recs, string(k))
		if err != nil {
			bad("workload binding %s: %v", k, err)
			return nil
		}
		for _, p := range ledger.CheckCharges(rec.binding(string(k)), run.GPUs) {
			bad("%s", p)
		}
		return nil
	})
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
