package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrJobBound: the run's tickets already started another scheduler job
// (another job id, or the same id from another scheduler). Nothing was
// written.
var ErrJobBound = errors.New("the run is bound to another scheduler job")

// Jobs binds a run's admission tickets to the one scheduler job they
// started (a Slurm prolog, a Ray job submitter: POST /v1/tickets/verify
// with a job id), the way Workloads binds a run to one Kubernetes object.
// The binding is the run's, so a renewed ticket of the run binds the same
// job. Both stores implement it; ledgertest runs one conformance suite
// against each.
type Jobs interface {
	// BindJob records that b.Scheduler started job b.JobID for b.RunID, in
	// one transaction serialized with the run's transitions:
	//
	//   - the run must exist (else ErrNotFound) and may take work at b.At
	//     (RunRecord.MayWork: else a *RevocationError, *RunHaltedError or
	//     *RunEndedError, nothing written): a job is new work;
	//   - with no binding yet, (b.Scheduler, b.JobID) becomes the run's job,
	//     unless the run's ticket already created a Kubernetes workload
	//     (Workloads): then a *SinkBoundError naming it (it unwraps to
	//     ErrJobBound), no binding returned; with the same scheduler and job
	//     id bound (a retried prolog), nothing changes; with another,
	//     ErrJobBound and the binding as stored.
	//
	// It returns the binding as stored afterwards. b must pass
	// JobBind.Validate, else ErrInvalid.
	BindJob(ctx context.Context, b JobBind) (JobBinding, error)

	// JobBinding returns the run's job binding, or ErrNotFound when its
	// tickets started no job yet.
	JobBinding(ctx context.Context, runID string) (JobBinding, error)
}

// JobBind asks BindJob to bind a run to one scheduler job.
type JobBind struct {
	RunID string
	// Scheduler is the sub of the scheduler identity that asked
	// (trust.schedulers); JobID the scheduler's own id of the job (a Slurm
	// job id, a Ray submission id).
	Scheduler, JobID string
	At               time.Time
}

// JobBinding is the scheduler job a run's tickets started.
type JobBinding struct {
	RunID, Scheduler, JobID string
	BoundAt                 time.Time
}

// Same reports whether b names the job bound in w.
func (w JobBinding) Same(b JobBind) bool { return w.Scheduler == b.Scheduler && w.JobID == b.JobID }

// Validate checks b: a run id, a scheduler and a job id of at most
// MaxIDLen printable bytes, a time. The error wraps ErrInvalid.
func (b JobBind) Validate() error {
	bad := func(field, problem string) error {
		return fmt.Errorf("ledger: job %s %s: %w", field, problem, ErrInvalid)
	}
	if !IsRunID(b.RunID) {
		return bad("RunID", "is not a run id from NewRunID")
	}
	if p := idProblem(b.Scheduler); p != "" {
		return bad("Scheduler", p)
	}
	if p := idProblem(b.JobID); p != "" {
		return bad("JobID", p)
	}
	if b.At.IsZero() {
		return bad("At", "is zero")
	}
	return nil
}

// CheckJob is the rule both stores apply inside BindJob's transaction to
// the run r and its binding (bound false when there is none yet): it
// returns whether b must be written, or why not.
func CheckJob(r RunRecord, bound bool, w JobBinding, b JobBind) (write bool, err error) {
	if err := r.MayWork(b.At); err != nil {
		return false, err
	}
	switch {
	case !bound:
		return true, nil
	case w.Same(b):
		return false, nil
	}
	return false, fmt.Errorf("ledger: bind job: %w", ErrJobBound)
}
