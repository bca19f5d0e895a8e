package ledgertest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

func (f *fixture) workloads() ledger.Workloads {
	f.t.Helper()
	w, ok := f.s.(ledger.Workloads)
	if !ok {
		f.t.Fatalf("%T does not implement ledger.Workloads", f.s)
	}
	return w
}

// admittedRun commits a train.create and returns its run id.
func (f *fixture) admittedRun() string {
	f.t.Helper()
	c := f.deposit("acct-w", "train.create")
	return f.commit(admission(c, "key-"+c.Ref[4:12], "req-"+c.Ref)).RunID
}

func wantBinding(t *testing.T, got ledger.WorkloadBinding, identity string, uids ...string) {
	t.Helper()
	if got.Identity != identity || !slices.Equal(got.UIDs, uids) {
		t.Fatalf("binding = %q %v, want %q %v", got.Identity, got.UIDs, identity, uids)
	}
}

func testWorkloadBindsOnce(t *testing.T, f *fixture) {
	w := f.workloads()
	run := f.admittedRun()
	at := base.Add(time.Minute)
	if _, err := w.WorkloadBinding(f.ctx, run); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("WorkloadBinding before any bind: %v, want ErrNotFound", err)
	}
	const job = "batch/Job/team-a/train-1"
	b, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, Identity: job, UID: "uid-1", At: at})
	if err != nil {
		t.Fatal(err)
	}
	wantBinding(t, b, job, "uid-1")
	if !b.BoundAt.Equal(at) {
		t.Fatalf("BoundAt %v, want %v", b.BoundAt, at)
	}
	// A retried create of the same identity (a new uid) is the same workload.
	b, err = w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, Identity: job, UID: "uid-2", At: at.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	wantBinding(t, b, job, "uid-1", "uid-2")
	// The same bind again writes nothing new.
	if b, err = w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, Identity: job, UID: "uid-2", At: at.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	wantBinding(t, b, job, "uid-1", "uid-2")
	// Another object with the same run's ticket is refused and changes nothing.
	b, err = w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, Identity: "batch/Job/team-a/train-2", UID: "uid-3", At: at})
	wantErr(t, "BindWorkload(another identity)", err, ledger.ErrWorkloadBound)
	wantBinding(t, b, job, "uid-1", "uid-2")
	got, err := w.WorkloadBinding(f.ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	wantBinding(t, got, job, "uid-1", "uid-2")
	if !got.BoundAt.Equal(at) {
		t.Fatalf("BoundAt moved: %v", got.BoundAt)
	}
	// A run that was never admitted binds nothing.
	_, err = w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: ledger.NewRunID(), Identity: job, UID: "uid-9", At: at})
	wantErr(t, "BindWorkload(unknown run)", err, ledger.ErrNotFound)
}

func testWorkloadChildren(t *testing.T, f *fixture) {
	w := f.workloads()
	run := f.admittedRun()
	at := base.Add(time.Minute)
	// A child before its root is bound: refused.
	_, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, UID: "job-1", OwnerUID: "js-1", At: at})
	wantErr(t, "BindWorkload(child of nothing)", err, ledger.ErrWorkloadOwnerUnbound)
	if _, err := w.WorkloadBinding(f.ctx, run); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a refused child left a binding: %v", err)
	}
	const js = "jobset.x-k8s.io/JobSet/team-a/train"
	if _, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, Identity: js, UID: "js-1", At: at}); err != nil {
		t.Fatal(err)
	}
	b, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, UID: "job-1", OwnerUID: "js-1", At: at})
	if err != nil {
		t.Fatal(err)
	}
	wantBinding(t, b, js, "js-1", "job-1")
	_, err = w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, UID: "job-2", OwnerUID: "someone-else", At: at})
	wantErr(t, "BindWorkload(child of a foreign owner)", err, ledger.ErrWorkloadOwnerUnbound)
	got, err := w.WorkloadBinding(f.ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	wantBinding(t, got, js, "js-1", "job-1")
}

func testWorkloadConcurrentRoots(t *testing.T, f *fixture) {
	w := f.workloads()
	run := f.admittedRun()
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run,
				Identity: "batch/Job/ns/job-" + string(rune('a'+i)), UID: "uid-" + string(rune('a'+i)), At: base})
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("two different objects bound one run: %d and %d", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, ledger.ErrWorkloadBound):
			t.Fatalf("bind %d: %v", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no bind won")
	}
	got, err := w.WorkloadBinding(f.ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	wantBinding(t, got, "batch/Job/ns/job-"+string(rune('a'+won)), "uid-"+string(rune('a'+won)))
}

func testWorkloadInvalid(t *testing.T, f *fixture) {
	w := f.workloads()
	run := f.admittedRun()
	for name, b := range map[string]ledger.WorkloadBind{
		"no run id":        {RunID: "", Identity: "x", UID: "u", At: base},
		"no identity":      {RunID: run, UID: "u", At: base},
		"no uid":           {RunID: run, Identity: "x", At: base},
		"control char":     {RunID: run, Identity: "x\n", UID: "u", At: base},
		"zero time":        {RunID: run, Identity: "x", UID: "u"},
		"owner with a NUL": {RunID: run, UID: "u", OwnerUID: "o\x00", At: base},
	} {
		_, err := w.BindWorkload(f.ctx, b)
		wantErr(t, "BindWorkload("+name+")", err, ledger.ErrInvalid)
	}
	if _, err := w.WorkloadBinding(f.ctx, run); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("an invalid bind left a binding: %v", err)
	}
}
