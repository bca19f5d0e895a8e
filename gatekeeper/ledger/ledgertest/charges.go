package ledgertest

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// Child workloads charged together: a child that is not a Pod holds the
// GPUs the policy counted for it, and the children of one owner together
// stay within the run's GPUs (ledger.Step), decided in the bind's
// transaction.

// wantCharges asserts a binding's charges.
func wantCharges(t *testing.T, what string, got ledger.WorkloadBinding, want ...ledger.WorkloadCharge) {
	t.Helper()
	if len(got.Charges) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got.Charges, want)) {
		t.Fatalf("%s: charges %+v, want %+v", what, got.Charges, want)
	}
}

// wantGPUsExceed asserts err is a *WorkloadGPUsError with the figures.
func wantGPUsExceed(t *testing.T, what string, err error, held, gpus, run int) {
	t.Helper()
	ge, ok := errors.AsType[*ledger.WorkloadGPUsError](err)
	if !ok || !errors.Is(err, ledger.ErrWorkloadGPUsExceed) || ge.Held != held || ge.GPUs != gpus || ge.RunGPUs != run {
		t.Fatalf("%s: err = %v (%+v), want a *WorkloadGPUsError of %d held + %d > %d", what, err, ge, held, gpus, run)
	}
}

// testWorkloadCharges: a RayService (root) on a run of 16 GPUs. Its first
// RayCluster (16) is charged; its retry and an UPDATE asking fewer GPUs
// change nothing; a second RayCluster (a zero-downtime upgrade, 16) is
// refused with the figures and nothing written, also when retried; the
// first RayCluster re-created under its name takes its charge over; a
// Pod is never charged. A stage advance grows the run to 32: the second
// RayCluster now fits, and an UPDATE raising it to 24 is re-checked and
// refused (16 + 24 > 32), the charge staying at 16.
func testWorkloadCharges(t *testing.T, f *fixture) {
	const bk = "bk_charges"
	a := f.create("acct_42", bk, "charges", 16, 64)
	a.Stage = "pretrain"
	run := f.commit(a).RunID
	w := f.workloads()
	at := a.CreatedAt.Add(time.Minute)
	const (
		svc   = "ray.io/RayService/team-a/serve"
		rcA   = "ray.io/RayCluster/team-a/serve-raycluster-aaaaa"
		rcB   = "ray.io/RayCluster/team-a/serve-raycluster-bbbbb"
		owner = "svc-1"
	)
	bind := func(b ledger.WorkloadBind) (ledger.WorkloadBinding, error) {
		t.Helper()
		b.RunID, b.At = run, at
		return w.BindWorkload(f.ctx, b)
	}
	if _, err := bind(ledger.WorkloadBind{Identity: svc, UID: owner}); err != nil {
		t.Fatal(err)
	}
	first := ledger.WorkloadCharge{OwnerUID: owner, Name: rcA, UID: "rc-a", GPUs: 16}
	got, err := bind(ledger.WorkloadBind{Identity: rcA, UID: "rc-a", OwnerUID: owner, GPUs: 16})
	if err != nil {
		t.Fatalf("the first RayCluster: %v", err)
	}
	wantBinding(t, got, svc, owner, "rc-a")
	wantCharges(t, "the first RayCluster", got, first)
	for _, gpus := range []int{16, 8} {
		got, err = bind(ledger.WorkloadBind{Identity: rcA, UID: "rc-a", OwnerUID: owner, GPUs: gpus})
		if err != nil {
			t.Fatalf("the first RayCluster again with %d GPUs: %v", gpus, err)
		}
		wantCharges(t, fmt.Sprintf("the first RayCluster again with %d GPUs", gpus), got, first)
	}
	for range 2 {
		_, err = bind(ledger.WorkloadBind{Identity: rcB, UID: "rc-b", OwnerUID: owner, GPUs: 16})
		wantGPUsExceed(t, "the second RayCluster", err, 16, 16, 16)
	}
	got, err = w.WorkloadBinding(f.ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	wantBinding(t, got, svc, owner, "rc-a")
	wantCharges(t, "after the refusal", got, first)
	// A Pod of the first RayCluster is checked alone by the policy.
	if got, err = bind(ledger.WorkloadBind{UID: "pod-1", OwnerUID: "rc-a", Leaf: true, GPUs: 16}); err != nil {
		t.Fatalf("a Pod: %v", err)
	}
	wantCharges(t, "after a Pod", got, first)
	// The first RayCluster deleted and re-created under its name.
	again := ledger.WorkloadCharge{OwnerUID: owner, Name: rcA, UID: "rc-a2", GPUs: 16}
	if got, err = bind(ledger.WorkloadBind{Identity: rcA, UID: "rc-a2", OwnerUID: owner, GPUs: 16}); err != nil {
		t.Fatalf("the first RayCluster re-created: %v", err)
	}
	wantBinding(t, got, svc, owner, "rc-a", "rc-a2")
	wantCharges(t, "the first RayCluster re-created", got, again)

	f.commit(f.grow(bk, run, "grow-charges", "pretrain", "long_context", 32, at))
	f.wantGPUs(run, "long_context", 32)
	second := ledger.WorkloadCharge{OwnerUID: owner, Name: rcB, UID: "rc-b", GPUs: 16}
	if got, err = bind(ledger.WorkloadBind{Identity: rcB, UID: "rc-b", OwnerUID: owner, GPUs: 16}); err != nil {
		t.Fatalf("the second RayCluster on the grown run: %v", err)
	}
	wantCharges(t, "the second RayCluster on the grown run", got, again, second)
	_, err = bind(ledger.WorkloadBind{Identity: rcB, UID: "rc-b", OwnerUID: owner, GPUs: 24})
	wantGPUsExceed(t, "the second RayCluster raised to 24", err, 16, 24, 32)
	got, err = w.WorkloadBinding(f.ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	wantBinding(t, got, svc, owner, "rc-a", "rc-a2", "rc-b")
	wantCharges(t, "after the refused raise", got, again, second)
	// Once the run ended, a bind that charges nothing new succeeds and one
	// that charges anything is refused.
	f.commit(f.lifecycle("acct_42", "train.cancel", bk, run, "cancel-charges", at.Add(time.Second)))
	at = at.Add(2 * time.Second)
	if _, err := bind(ledger.WorkloadBind{Identity: rcB, UID: "rc-b", OwnerUID: owner, GPUs: 16}); err != nil {
		t.Fatalf("an UPDATE of a charged child of an ended run: %v", err)
	}
	_, err = bind(ledger.WorkloadBind{Identity: rcA, UID: "rc-a3", OwnerUID: owner, GPUs: 16})
	wantErr(t, "a child re-created on an ended run", err, ledger.ErrRunEnded)
}

// testRaceWorkloadCharges runs RaceWorkloadCharges on the one store.
func testRaceWorkloadCharges(t *testing.T, f *fixture) {
	for _, n := range []int{2, 8} {
		RaceWorkloadCharges(t, []ledger.Store{f.s}, fmt.Sprintf("bk_chargerace_%d", n), n)
	}
}

// RaceWorkloadCharges races, on a run of 8 GPUs bound to a JobSet, n
// binds of n child Jobs of 8 GPUs each, spread over stores (replicas
// sharing one database): exactly one is charged, every other is refused
// ErrWorkloadGPUsExceed and recorded nowhere. Then n retries of the
// winner race: each succeeds and the charge stays one.
func RaceWorkloadCharges(t *testing.T, stores []ledger.Store, booking string, n int) {
	t.Helper()
	f := &fixture{t: t, s: stores[0], ctx: t.Context()}
	run := f.createUnder("acct_42", booking, booking+"-create", "ent-"+booking).RunID
	at := base.Add(time.Minute)
	const js = "jobset.x-k8s.io/JobSet/team-a/train"
	if _, err := f.workloads().BindWorkload(f.ctx, ledger.WorkloadBind{RunID: run, Identity: js, UID: "js-1", At: at}); err != nil {
		t.Fatal(err)
	}
	child := func(i int) ledger.WorkloadBind {
		return ledger.WorkloadBind{RunID: run, Identity: fmt.Sprintf("batch/Job/team-a/train-w-%d", i),
			UID: fmt.Sprintf("job-%d", i), OwnerUID: "js-1", GPUs: 8, At: at}
	}
	bind := func(i int, b ledger.WorkloadBind) error {
		w, ok := stores[i%len(stores)].(ledger.Workloads)
		if !ok {
			return fmt.Errorf("%T does not implement ledger.Workloads", stores[i%len(stores)])
		}
		_, err := w.BindWorkload(t.Context(), b)
		return err
	}
	errs := make([]error, n)
	race(n, func(i int) { errs[i] = bind(i, child(i)) })
	win := soleWinner(t, "child bind", errs, ledger.ErrWorkloadGPUsExceed)
	want := ledger.WorkloadCharge{OwnerUID: "js-1", Name: child(win).Identity, UID: child(win).UID, GPUs: 8}
	race(n, func(i int) { errs[i] = bind(i, child(win)) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("retry %d of the charged child: %v", i, err)
		}
	}
	got, err := f.workloads().WorkloadBinding(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	wantBinding(t, got, js, "js-1", child(win).UID)
	wantCharges(t, "after the race", got, want)
}
