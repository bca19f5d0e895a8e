package ledgertest

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
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

// testWorkloadActiveRoot: one root object of a name has children at a time.
// The first child activates its root; a Leaf (a Pod) is not recorded; a
// re-created object of the same name (a newer root uid) takes over at its
// first child, after which the older uid and its descendants admit nothing
// (ErrWorkloadOwnerRetired); a failed re-create that never has a child
// changes nothing.
func testWorkloadActiveRoot(t *testing.T, f *fixture) {
	w := f.workloads()
	run := f.admittedRun()
	at := base.Add(time.Minute)
	const js = "jobset.x-k8s.io/JobSet/team-a/train"
	bind := func(b ledger.WorkloadBind) (ledger.WorkloadBinding, error) {
		t.Helper()
		b.RunID, b.At = run, at
		if b.OwnerUID == "" {
			b.Identity = js
		}
		return w.BindWorkload(f.ctx, b)
	}
	mustBind := func(b ledger.WorkloadBind) ledger.WorkloadBinding {
		t.Helper()
		got, err := bind(b)
		if err != nil {
			t.Fatalf("BindWorkload(%+v): %v", b, err)
		}
		return got
	}
	mustBind(ledger.WorkloadBind{UID: "js-1"})
	// A create retried while js-1 lives: the apiserver answers AlreadyExists, js-2 never has a child.
	if got := mustBind(ledger.WorkloadBind{UID: "js-2"}); got.Active != "" {
		t.Fatalf("Active before any child = %q", got.Active)
	}
	got := mustBind(ledger.WorkloadBind{UID: "job-1", OwnerUID: "js-1"})
	if got.Active != "js-1" || got.RootOf("job-1") != "js-1" {
		t.Fatalf("after js-1's first child: Active %q, root of job-1 %q", got.Active, got.RootOf("job-1"))
	}
	got = mustBind(ledger.WorkloadBind{UID: "pod-1", OwnerUID: "job-1", Leaf: true})
	wantBinding(t, got, js, "js-1", "js-2", "job-1")
	if !got.Admits("job-1") || got.Admits("js-2") {
		t.Fatalf("Admits: job-1 %v, js-2 %v; want true, false", got.Admits("job-1"), got.Admits("js-2"))
	}
	// js-1 deleted, re-created as js-3: its first child takes over.
	mustBind(ledger.WorkloadBind{UID: "js-3"})
	got = mustBind(ledger.WorkloadBind{UID: "job-3", OwnerUID: "js-3"})
	if got.Active != "js-3" {
		t.Fatalf("after the re-created object's first child: Active %q, want js-3", got.Active)
	}
	for _, b := range []ledger.WorkloadBind{
		{UID: "pod-2", OwnerUID: "job-1", Leaf: true}, // a Pod of the deleted object's Job
		{UID: "job-2", OwnerUID: "js-1"},              // a Job of the deleted object
		{UID: "job-4", OwnerUID: "js-2"},              // the create that never landed, older than js-3
	} {
		_, err := bind(b)
		wantErr(t, "BindWorkload(child of a replaced root "+b.OwnerUID+")", err, ledger.ErrWorkloadOwnerRetired)
	}
	got, err := w.WorkloadBinding(f.ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	wantBinding(t, got, js, "js-1", "js-2", "job-1", "js-3", "job-3")
	if got.Active != "js-3" || got.RootOf("job-3") != "js-3" || got.RootOf("js-2") != "js-2" {
		t.Fatalf("stored: Active %q, roots %v", got.Active, got.Roots)
	}
	// A Pod of the live object's Job: admitted with nothing to write.
	if !got.Admits("job-3") {
		t.Fatal("the live Job's Pods are not admitted by the stored binding")
	}
}

// testWorkloadGeneratedName: a root created with generateName binds the
// prefix, so a create retried after a lost answer (a new generated name
// and uid) is the same workload; of two such objects, the first with a
// child runs and the other's children are ErrWorkloadBound.
func testWorkloadGeneratedName(t *testing.T, f *fixture) {
	w := f.workloads()
	run := f.admittedRun()
	at := base.Add(time.Minute)
	id := "batch/Job/team-a/train-" + ledger.GeneratedIdentitySuffix
	for _, uid := range []string{"lost-1", "retry-2"} {
		if _, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, Identity: id, UID: uid, At: at}); err != nil {
			t.Fatalf("bind %s: %v", uid, err)
		}
	}
	got, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, UID: "pod-a", OwnerUID: "retry-2", Leaf: true, At: at})
	if err != nil || got.Active != "retry-2" {
		t.Fatalf("the retried object's first Pod: %+v, %v", got, err)
	}
	_, err = w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, UID: "pod-b", OwnerUID: "lost-1", Leaf: true, At: at})
	wantErr(t, "BindWorkload(a Pod of the other object of the generateName)", err, ledger.ErrWorkloadBound)
	got, err = w.WorkloadBinding(f.ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	wantBinding(t, got, id, "lost-1", "retry-2")
	if got.Active != "retry-2" {
		t.Fatalf("Active %q, want retry-2", got.Active)
	}
}

// testWorkloadRunStateInBind: BindWorkload asks RunRecord.MayWork in its
// own transaction, so a halt, a revocation (of the run's booking or of
// the entitlement it was admitted under) or an end committed after the
// webhook read the run refuses a bind that would write (the typed error)
// and writes nothing: no uid, no active root, no child charge; a bind that
// writes nothing is not refused.
func testWorkloadRunStateInBind(t *testing.T, f *fixture) {
	w := f.workloads()
	const job = "batch/Job/team-a/stopped"
	revokedBy := func(kind ledger.RevocationKind, subject string) func(error) bool {
		return func(err error) bool {
			re, ok := errors.AsType[*ledger.RevocationError](err)
			return ok && errors.Is(err, ledger.ErrRevoked) && re.Revocation.Kind == kind && re.Revocation.Subject == subject
		}
	}
	for _, tc := range []struct {
		name, booking, ent string
		stop               func(run string, at time.Time)
		refused            func(error) bool
	}{
		{"halted", "bk_wl", "ent-w",
			func(run string, at time.Time) {
				if _, _, err := f.s.HaltRun(f.ctx, halt(run, "bk_wl", at)); err != nil {
					t.Fatal(err)
				}
			},
			func(err error) bool {
				_, ok := errors.AsType[*ledger.RunHaltedError](err)
				return ok && errors.Is(err, ledger.ErrRunHalted)
			}},
		{"booking revoked", "bk_wl_rb", "ent-wb",
			func(_ string, at time.Time) { f.revoke(ledger.RevokeBooking, "bk_wl_rb", at) },
			revokedBy(ledger.RevokeBooking, "bk_wl_rb")},
		{"entitlement revoked", "bk_wl_re", "ent-wr",
			func(_ string, at time.Time) { f.revoke(ledger.RevokeEntitlement, "ent-wr", at) },
			revokedBy(ledger.RevokeEntitlement, "ent-wr")},
	} {
		a := f.createUnder("acct_42", tc.booking, strings.ReplaceAll(tc.name, " ", "-"), tc.ent)
		at := a.CreatedAt.Add(time.Minute)
		if _, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: a.RunID, Identity: job, UID: "uid-1", At: at}); err != nil {
			t.Fatal(err)
		}
		tc.stop(a.RunID, at)
		for what, b := range map[string]ledger.WorkloadBind{
			"root":          {RunID: a.RunID, Identity: job, UID: "uid-2", At: at.Add(time.Second)},
			"child":         {RunID: a.RunID, UID: "pod-1", OwnerUID: "uid-1", Leaf: true, At: at.Add(time.Second)},
			"charged child": {RunID: a.RunID, Identity: "batch/Job/team-a/worker", UID: "child-1", OwnerUID: "uid-1", GPUs: 8, At: at.Add(time.Second)},
		} {
			if _, err := w.BindWorkload(f.ctx, b); !tc.refused(err) {
				t.Fatalf("BindWorkload(%s) of a %s run: %v, want its typed refusal", what, tc.name, err)
			}
		}
		// The bound object again (an UPDATE, as teardown makes): nothing new, no refusal.
		got, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: a.RunID, Identity: job, UID: "uid-1", At: at.Add(time.Second)})
		if err != nil {
			t.Fatalf("re-bind of the bound object of a %s run: %v", tc.name, err)
		}
		wantBinding(t, got, job, "uid-1")
		if got, err = w.WorkloadBinding(f.ctx, a.RunID); err != nil {
			t.Fatal(err)
		}
		wantBinding(t, got, job, "uid-1")
		if got.Active != "" {
			t.Fatalf("%s run: Active %q after refused binds", tc.name, got.Active)
		}
		wantCharges(t, tc.name+" run after refused binds", got)
	}

	ended := f.createUnder("acct_42", "bk_wl", "ended", "ent-w")
	end := ended.CreatedAt.Add(time.Minute)
	f.commit(f.lifecycle("acct_42", api.TrainCancel, "bk_wl", ended.RunID, "cancel-ended", end))
	_, err := w.BindWorkload(f.ctx, ledger.WorkloadBind{RunID: ended.RunID, Identity: job, UID: "uid-9", At: end.Add(time.Second)})
	wantErr(t, "BindWorkload(cancelled run)", err, ledger.ErrRunEnded)
	if _, err := w.WorkloadBinding(f.ctx, ended.RunID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a refused bind of a cancelled run left a binding: %v", err)
	}
}
