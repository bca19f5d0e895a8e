package server_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

// slowFabric is the embedded bundle with InfiniBand HDR at 0.01 GB/s per
// GPU: the same rules, another table, so other training facts (the
// data-parallel communication) for the same manifest.
func slowFabric(t *testing.T) *policy.Engine {
	t.Helper()
	fsys := bundletest.Edited(t, policies.Bundle(), "ito/tables/fabrics/data.json",
		`"gbytes_per_s_per_gpu": 25,`, `"gbytes_per_s_per_gpu": 0.01,`)
	e, err := policy.New(context.Background(), policy.Options{Deadline: patience.Deadline, Bundle: fsys})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestShadowComputesItsOwnFacts: the shadow bundle decides with training
// facts computed from its own tables, never the enforced bundle's: a
// candidate whose InfiniBand moves 0.01 GB/s denies the llama3-8b run the enforced
// bundle allows (with the enforced facts it would have agreed).
func TestShadowComputesItsOwnFacts(t *testing.T) {
	cand := slowFabric(t)
	results := make(chan admission.ShadowResult, 4)
	h := newHarness(t, func(o *admission.Options) {
		o.Shadow = func() admission.Decider { return cand }
		o.OnShadow = func(r admission.ShadowResult) { results <- r }
	})
	m, _ := h.runner.LoadManifest("llama3-8b")
	a, _, err := h.runner.Create(context.Background(), m, "k-shadow-facts")
	if err != nil || a.Status != 200 {
		t.Fatalf("enforced: %d %v %v", a.Status, a.Codes(), err)
	}
	select {
	case r := <-results:
		if r.Kind != "allow_to_deny" || !slices.Contains(r.ShadowCodes, "DP_COMM_BOUND") {
			t.Fatalf("shadow result %+v: the candidate did not judge with its own fabric table", r)
		}
	case <-time.After(patience.Wait):
		t.Fatal("no shadow result")
	}
}
