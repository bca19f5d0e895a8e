package ledger

import "fmt"

// SinkBoundError: a run's tickets start work in one sink only — one
// Kubernetes workload (Workloads) or one scheduler job (Jobs), never one of
// each, which would run the admitted GPUs twice. BindJob returns it when
// the run's ticket already created a workload (Workload set; it unwraps to
// ErrJobBound); BindWorkload, for a bind that would write, when the run's
// tickets already started a scheduler job (Job set; it unwraps to
// ErrWorkloadBound). Both stores decide it in the bind's own transaction,
// serialized with the other sink's bind of the same run, so of two racing
// binds in different sinks exactly one binds. Nothing was written.
type SinkBoundError struct {
	// Workload is the run's binding to a Kubernetes workload, for BindJob.
	Workload *WorkloadBinding
	// Job is the run's binding to a scheduler job, for BindWorkload.
	Job *JobBinding
}

func (e *SinkBoundError) Error() string {
	if e.Workload != nil {
		return fmt.Sprintf("ledger: bind job: the run's ticket already created Kubernetes workload %s", e.Workload.Identity)
	}
	if e.Job != nil {
		return fmt.Sprintf("ledger: bind workload: the run's tickets already started job %s of scheduler %s", e.Job.JobID, e.Job.Scheduler)
	}
	return "ledger: the run is bound in another sink"
}

// Unwrap is ErrJobBound for a refused BindJob, ErrWorkloadBound for a
// refused BindWorkload.
func (e *SinkBoundError) Unwrap() error {
	if e.Workload != nil {
		return ErrJobBound
	}
	return ErrWorkloadBound
}
