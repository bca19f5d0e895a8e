package ledgertest

import (
	"errors"
	"fmt"
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
