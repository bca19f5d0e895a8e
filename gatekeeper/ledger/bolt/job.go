package bolt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

type jobRecord struct {
	Scheduler string    `json:"scheduler"`
	JobID     string    `json:"job_id"`
	BoundAt   time.Time `json:"bound_at"`
}

func (r jobRecord) binding(runID string) ledger.JobBinding {
	return ledger.JobBinding{RunID: runID, Scheduler: r.Scheduler, JobID: r.JobID, BoundAt: r.BoundAt.UTC()}
}

func getJob(tx *bbolt.Tx, runID string) (jobRecord, bool, error) {
	v := tx.Bucket(bucketJobs).Get([]byte(runID))
	if v == nil {
		return jobRecord{}, false, nil
	}
	var rec jobRecord
	if err := json.Unmarshal(v, &rec); err != nil {
		return jobRecord{}, false, fmt.Errorf("corrupt job record: %w", err)
	}
	return rec, true, nil
}

// BindJob implements ledger.Jobs in one write transaction: the single
// writer serializes it with every transition of the run.
func (s *Store) BindJob(ctx context.Context, b ledger.JobBind) (ledger.JobBinding, error) {
	if err := b.Validate(); err != nil {
		return ledger.JobBinding{}, err
	}
	var out ledger.JobBinding
	err := s.write(ctx, "bind job", s.db.Update, func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketRunRecs).Get([]byte(b.RunID)) == nil {
			return abort(fmt.Errorf("ledger: bind job: run: %w", ledger.ErrNotFound))
		}
		run, err := getRun(tx.Bucket(bucketRunRecs), b.RunID)
		if err != nil {
			return err
		}
		rec, bound, err := getJob(tx, b.RunID)
		if err != nil {
			return err
		}
		write, err := ledger.CheckJob(run.run(), bound, rec.binding(b.RunID), b)
		if bound {
			out = rec.binding(b.RunID)
		}
		switch {
		case err != nil:
			return abort(err)
		case !write:
			return nil
		}
		// One sink per run: the single writer serializes this with the
		// run's workload binds.
		if v := tx.Bucket(bucketWorkloads).Get([]byte(b.RunID)); v != nil {
			var wr workloadRecord
			if err := json.Unmarshal(v, &wr); err != nil {
				return fmt.Errorf("corrupt workload record: %w", err)
			}
			w := wr.binding(b.RunID)
			return abort(&ledger.SinkBoundError{Workload: &w})
		}
		rec = jobRecord{Scheduler: b.Scheduler, JobID: b.JobID, BoundAt: b.At.UTC().Truncate(time.Microsecond)}
		out = rec.binding(b.RunID)
		return putJSON(tx.Bucket(bucketJobs), []byte(b.RunID), rec)
	})
	switch {
	case errors.As(err, new(*ledger.SinkBoundError)):
		return ledger.JobBinding{}, err
	case errors.Is(err, ledger.ErrJobBound):
		return out, err
	case err != nil:
		return ledger.JobBinding{}, err
	}
	return out, nil
}

// JobBinding implements ledger.Jobs.
func (s *Store) JobBinding(ctx context.Context, runID string) (ledger.JobBinding, error) {
	var out ledger.JobBinding
	err := s.read(ctx, "job binding", func(tx *bbolt.Tx) error {
		rec, bound, err := getJob(tx, runID)
		if err != nil {
			return err
		}
		if !bound {
			return abort(fmt.Errorf("ledger: job binding: %w", ledger.ErrNotFound))
		}
		out = rec.binding(runID)
		return nil
	})
	if err != nil {
		return ledger.JobBinding{}, err
	}
	return out, nil
}
