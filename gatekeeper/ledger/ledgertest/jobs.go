package ledgertest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// One ticket, one scheduler job: ledger.Jobs binds a run to the first job
// a scheduler started with its tickets.

func jobsOf(t *testing.T, s ledger.Store) ledger.Jobs {
	t.Helper()
	j, ok := s.(ledger.Jobs)
	if !ok {
		t.Fatalf("%T does not implement ledger.Jobs", s)
	}
	return j
}

func wantJob(t *testing.T, what string, got ledger.JobBinding, run, scheduler, job string, at time.Time) {
	t.Helper()
	if got.RunID != run || got.Scheduler != scheduler || got.JobID != job || !got.BoundAt.Equal(at) {
		t.Fatalf("%s: binding = %+v, want run %s job %s/%s bound at %s", what, got, run, scheduler, job, at)
	}
}

// testJobBindsOnce: the first bind binds; the same scheduler and job id
// again is idempotent (the binding and its time unchanged); another job id,
// or the same id from another scheduler, is ErrJobBound with the stored
// binding and changes nothing; an unknown run binds nothing.
func testJobBindsOnce(t *testing.T, f *fixture) {
	j := jobsOf(t, f.s)
	a := f.createUnder("acct_42", "bk_job", "a", "ent-job")
	run := a.RunID
	at := a.CreatedAt.Add(time.Minute)
	if _, err := j.JobBinding(f.ctx, run); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("JobBinding before any bind: %v, want ErrNotFound", err)
	}
	b, err := j.BindJob(f.ctx, ledger.JobBind{RunID: run, Scheduler: "slurm-ctl", JobID: "4711", At: at})
	if err != nil {
		t.Fatal(err)
	}
	wantJob(t, "first bind", b, run, "slurm-ctl", "4711", at)
	b, err = j.BindJob(f.ctx, ledger.JobBind{RunID: run, Scheduler: "slurm-ctl", JobID: "4711", At: at.Add(time.Second)})
	if err != nil {
		t.Fatalf("the same job again: %v, want it bound (idempotent)", err)
	}
	wantJob(t, "the same job again", b, run, "slurm-ctl", "4711", at)
	for name, other := range map[string]ledger.JobBind{
		"another job id":        {RunID: run, Scheduler: "slurm-ctl", JobID: "4712", At: at},
		"another scheduler":     {RunID: run, Scheduler: "ray-submitter", JobID: "4711", At: at},
		"another job, same day": {RunID: run, Scheduler: "slurm-ctl", JobID: "4711 ", At: at.Add(time.Hour)},
	} {
		b, err := j.BindJob(f.ctx, other)
		wantErr(t, "BindJob("+name+")", err, ledger.ErrJobBound)
		wantJob(t, name+": the stored binding", b, run, "slurm-ctl", "4711", at)
	}
	got, err := j.JobBinding(f.ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	wantJob(t, "JobBinding", got, run, "slurm-ctl", "4711", at)
	_, err = j.BindJob(f.ctx, ledger.JobBind{RunID: ledger.NewRunID(), Scheduler: "slurm-ctl", JobID: "1", At: at})
	wantErr(t, "BindJob(unknown run)", err, ledger.ErrNotFound)
}

// testJobRunState: a run that may not take work (revoked with its booking,
// halted by a failed gate, cancelled, past its declared end) binds no job,
// with MayWork's error, whether or not it was bound before; nothing is
// written.
func testJobRunState(t *testing.T, f *fixture) {
	j := jobsOf(t, f.s)
	at := base.Add(time.Hour)
	revoked := f.createUnder("acct_42", "bk_job_rev", "rev", "ent-job-rev")
	halted := f.createUnder("acct_42", "bk_job_halt", "halt", "ent-job-halt")
	cancelled := f.createUnder("acct_42", "bk_job_cancel", "cancel", "ent-job-cancel")
	// The cancelled run was bound while live: the same job is refused after.
	if _, err := j.BindJob(f.ctx, ledger.JobBind{RunID: cancelled.RunID, Scheduler: "s", JobID: "1", At: at}); err != nil {
		t.Fatal(err)
	}
	f.revoke(ledger.RevokeBooking, "bk_job_rev", at)
	if _, _, err := f.s.HaltRun(f.ctx, halt(halted.RunID, "bk_job_halt", at)); err != nil {
		t.Fatal(err)
	}
	f.commit(f.lifecycle("acct_42", api.TrainCancel, "bk_job_cancel", cancelled.RunID, "cancel-it", at))
	later := at.Add(time.Second)
	for _, c := range []struct {
		run    string
		target error
		bound  bool
	}{{revoked.RunID, ledger.ErrRevoked, false}, {halted.RunID, ledger.ErrRunHalted, false},
		{cancelled.RunID, ledger.ErrRunEnded, true}} {
		_, err := j.BindJob(f.ctx, ledger.JobBind{RunID: c.run, Scheduler: "s", JobID: "1", At: later})
		wantErr(t, "BindJob of a run that may not work", err, c.target)
		got, err := j.JobBinding(f.ctx, c.run)
		if c.bound {
			wantJob(t, "the binding of the cancelled run", got, c.run, "s", "1", at)
		} else if !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a refused bind left a binding: %+v, %v", got, err)
		}
	}
	// Past its declared end (LiveUntil), a live-looking run binds nothing.
	expired := f.createUnder("acct_42", "bk_job_exp", "exp", "ent-job-exp")
	r := f.wantRunState(expired.RunID, at, api.RunLive)
	_, err := j.BindJob(f.ctx, ledger.JobBind{RunID: expired.RunID, Scheduler: "s", JobID: "1", At: r.LiveUntil})
	wantErr(t, "BindJob past the declared end", err, ledger.ErrRunEnded)
}

// testJobInvalid: a malformed bind is ErrInvalid and writes nothing.
func testJobInvalid(t *testing.T, f *fixture) {
	j := jobsOf(t, f.s)
	run := f.createUnder("acct_42", "bk_job_inv", "inv", "ent-job-inv").RunID
	for name, b := range map[string]ledger.JobBind{
		"no run id":         {Scheduler: "s", JobID: "1", At: base},
		"no scheduler":      {RunID: run, JobID: "1", At: base},
		"no job id":         {RunID: run, Scheduler: "s", At: base},
		"control character": {RunID: run, Scheduler: "s", JobID: "1\n", At: base},
		"zero time":         {RunID: run, Scheduler: "s", JobID: "1"},
	} {
		_, err := j.BindJob(f.ctx, b)
		wantErr(t, "BindJob("+name+")", err, ledger.ErrInvalid)
	}
	if _, err := j.JobBinding(f.ctx, run); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("an invalid bind left a binding: %v", err)
	}
}

// testRaceJobBind runs RaceJobBind on the one store.
func testRaceJobBind(t *testing.T, f *fixture) {
	for _, n := range []int{2, 8} {
		RaceJobBind(t, []ledger.Store{f.s}, fmt.Sprintf("bk_jobrace_%d", n), n)
	}
}

// RaceJobBind races n binds of one live run to n different job ids, and n
// retries of one job id, spread over stores (replicas sharing one
// database): exactly one job id wins, every other is ErrJobBound naming the
// winner, and the retries of the winner all succeed.
func RaceJobBind(t *testing.T, stores []ledger.Store, booking string, n int) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	run := f.createUnder("acct_42", booking, booking+"-create", "ent-"+booking).RunID
	at := base.Add(time.Minute)
	bound := make([]ledger.JobBinding, n)
	errs := make([]error, n)
	race(n, func(i int) {
		bound[i], errs[i] = jobsOf(t, stores[i%len(stores)]).BindJob(t.Context(),
			ledger.JobBind{RunID: run, Scheduler: "slurm-ctl", JobID: fmt.Sprintf("job-%d", i), At: at})
	})
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("two job ids bound one run: job-%d and job-%d", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, ledger.ErrJobBound):
			t.Fatalf("bind job-%d: %v, want nil or ErrJobBound", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no job id won")
	}
	winner := fmt.Sprintf("job-%d", won)
	for i := range errs {
		wantJob(t, fmt.Sprintf("bind job-%d", i), bound[i], run, "slurm-ctl", winner, at)
	}
	// Retries of the winner, at once: every one binds, nothing changes.
	race(n, func(i int) {
		bound[i], errs[i] = jobsOf(t, stores[i%len(stores)]).BindJob(t.Context(),
			ledger.JobBind{RunID: run, Scheduler: "slurm-ctl", JobID: winner, At: at.Add(time.Duration(i+1) * time.Second)})
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("retry %d of the bound job: %v", i, err)
		}
		wantJob(t, fmt.Sprintf("retry %d", i), bound[i], run, "slurm-ctl", winner, at)
	}
	for _, s := range stores {
		got, err := jobsOf(t, s).JobBinding(t.Context(), run)
		if err != nil {
			t.Fatal(err)
		}
		wantJob(t, "JobBinding after the race", got, run, "slurm-ctl", winner, at)
	}
}

// testOneSinkPerRun: a run's tickets start one Kubernetes workload or one
// scheduler job, never one of each. A run whose ticket created a workload
// binds no job (a *SinkBoundError naming the workload, ErrJobBound, no
// binding, nothing written); the workload's children still bind. A run
// that started a job binds no workload (naming the job, ErrWorkloadBound,
// nothing written); the job's retried prolog still binds.
func testOneSinkPerRun(t *testing.T, f *fixture) {
	j, w := jobsOf(t, f.s), f.workloads()
	at := base.Add(time.Minute)
	const identity = "batch/Job/team-a/train"

	k8s := f.createUnder("acct_42", "bk_sink_k8s", "sink-k8s", "ent-sink-k8s").RunID
	if _, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: k8s, Identity: identity, UID: "uid-job", At: at}); err != nil {
		t.Fatal(err)
	}
	b, err := j.BindJob(f.ctx, ledger.JobBind{RunID: k8s, Scheduler: "slurm-ctl", JobID: "4711", At: at})
	wantErr(t, "BindJob of a run bound to a workload", err, ledger.ErrJobBound)
	if se, ok := errors.AsType[*ledger.SinkBoundError](err); !ok || se.Workload == nil || se.Workload.Identity != identity ||
		!strings.Contains(err.Error(), identity) {
		t.Fatalf("BindJob: %v, want a *SinkBoundError naming %s", err, identity)
	}
	if b != (ledger.JobBinding{}) {
		t.Fatalf("BindJob returned binding %+v, want none", b)
	}
	if _, err := j.JobBinding(f.ctx, k8s); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused job bind left a binding: %v", err)
	}
	if _, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: k8s, UID: "uid-pod", OwnerUID: "uid-job", Leaf: true, At: at}); err != nil {
		t.Fatalf("the workload's Pod after the refused job: %v", err)
	}

	slurm := f.createUnder("acct_42", "bk_sink_slurm", "sink-slurm", "ent-sink-slurm").RunID
	if _, err := j.BindJob(f.ctx, ledger.JobBind{RunID: slurm, Scheduler: "slurm-ctl", JobID: "4711", At: at}); err != nil {
		t.Fatal(err)
	}
	got, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: slurm, Identity: identity, UID: "uid-job", At: at})
	wantErr(t, "BindWorkload of a run bound to a job", err, ledger.ErrWorkloadBound)
	if se, ok := errors.AsType[*ledger.SinkBoundError](err); !ok || se.Job == nil || se.Job.JobID != "4711" ||
		se.Job.Scheduler != "slurm-ctl" || !strings.Contains(err.Error(), "job 4711 of scheduler slurm-ctl") {
		t.Fatalf("BindWorkload: %v, want a *SinkBoundError naming job 4711 of slurm-ctl", err)
	}
	if got.Identity != "" || len(got.UIDs) != 0 {
		t.Fatalf("BindWorkload returned binding %+v, want none", got)
	}
	if _, err := w.WorkloadBinding(f.ctx, slurm); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused workload bind left a binding: %v", err)
	}
	bound, err := j.BindJob(f.ctx, ledger.JobBind{RunID: slurm, Scheduler: "slurm-ctl", JobID: "4711", At: at.Add(time.Minute)})
	if err != nil {
		t.Fatalf("the job's retried prolog after the refused workload: %v", err)
	}
	wantJob(t, "the retried prolog", bound, slurm, "slurm-ctl", "4711", at)
}

// testRaceJobWorkloadBind runs RaceJobWorkloadBind on the one store.
func testRaceJobWorkloadBind(t *testing.T, f *fixture) {
	for _, n := range []int{1, 4} {
		RaceJobWorkloadBind(t, []ledger.Store{f.s}, fmt.Sprintf("bk_sinkrace_%d", n), n)
	}
}

// RaceJobWorkloadBind races, on one live run, n binds of scheduler jobs
// (n job ids) against n binds of one Kubernetes workload's root (retries of
// one create), spread over stores (replicas sharing one database): exactly
// one sink binds the run. If the job sink won, one job id is bound, every
// workload bind is a *SinkBoundError naming it and the run has no workload
// binding; if the workload won, every job bind is a *SinkBoundError naming
// it and the run has no job binding.
func RaceJobWorkloadBind(t *testing.T, stores []ledger.Store, booking string, n int) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	run := f.createUnder("acct_42", booking, booking+"-create", "ent-"+booking).RunID
	at := base.Add(time.Minute)
	const identity = "kubeflow.org/PyTorchJob/team-a/train"
	jobErrs, wlErrs := make([]error, n), make([]error, n)
	race(2*n, func(i int) {
		s := stores[i%len(stores)]
		if i%2 == 0 {
			_, jobErrs[i/2] = jobsOf(t, s).BindJob(t.Context(),
				ledger.JobBind{RunID: run, Scheduler: "slurm-ctl", JobID: fmt.Sprintf("job-%d", i/2), At: at})
			return
		}
		w, ok := s.(ledger.Workloads)
		if !ok {
			wlErrs[i/2] = fmt.Errorf("%T does not implement ledger.Workloads", s)
			return
		}
		_, wlErrs[i/2] = w.BindWorkload(t.Context(), ledger.WorkloadBind{RunID: run, Identity: identity,
			UID: fmt.Sprintf("uid-%d", i/2), At: at})
	})
	job, jerr := jobsOf(t, stores[0]).JobBinding(t.Context(), run)
	wl, werr := f.workloads().WorkloadBinding(t.Context(), run)
	switch {
	case jerr == nil && werr == nil:
		t.Fatalf("both sinks bound the run: job %s/%s and workload %s", job.Scheduler, job.JobID, wl.Identity)
	case jerr == nil:
		for i, err := range wlErrs {
			se, ok := errors.AsType[*ledger.SinkBoundError](err)
			if !ok || se.Job == nil || se.Job.JobID != job.JobID || !errors.Is(err, ledger.ErrWorkloadBound) {
				t.Fatalf("workload bind %d with job %s bound: %v, want a *SinkBoundError naming it", i, job.JobID, err)
			}
		}
		won := 0
		for _, err := range jobErrs {
			if err == nil {
				won++
			} else if !errors.Is(err, ledger.ErrJobBound) {
				t.Fatalf("job bind: %v, want nil or ErrJobBound", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d job binds succeeded, want 1", won)
		}
	case werr == nil:
		for i, err := range jobErrs {
			se, ok := errors.AsType[*ledger.SinkBoundError](err)
			if !ok || se.Workload == nil || se.Workload.Identity != identity || !errors.Is(err, ledger.ErrJobBound) {
				t.Fatalf("job bind %d with the workload bound: %v, want a *SinkBoundError naming it", i, err)
			}
		}
		for i, err := range wlErrs {
			if err != nil {
				t.Fatalf("workload bind %d (a retry of the bound create): %v", i, err)
			}
		}
	default:
		t.Fatalf("neither sink bound the run: %v; %v; jobs %v; workloads %v", jerr, werr, jobErrs, wlErrs)
	}
}
