package admission_test

import (
	"context"
	"io/fs"
	"slices"
	"testing"
	"time"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

// TestOwnFacts: a recorded input carries the facts of the bundle that
// decided it; OwnFacts decides it with the candidate's own (its fabric
// table here says 0.01 GB/s), as itogate replay does. The recorded facts alone would
// have the candidate allow what its own table denies.
func TestOwnFacts(t *testing.T) {
	fsys := bundletest.Edited(t, policies.Bundle(), "ito/tables/fabrics/data.json",
		`"gbytes_per_s_per_gpu": 25,`, `"gbytes_per_s_per_gpu": 0.01,`)
	cand, err := policy.New(context.Background(), policy.Options{Deadline: patience.Deadline, Bundle: fsys})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := fs.ReadFile(fixtures.Manifests(), "llama3-8b.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := manifest.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	recorded := scenario.OfflineInput(raw, doc, nil, nil, time.Unix(1764403200, 0), embeddedFacts())
	stale, err := cand.Decide(context.Background(), recorded)
	if err != nil || !stale.Allow {
		t.Fatalf("with the recorded facts: %+v %v", stale, err)
	}
	own, err := admission.OwnFacts(cand).Decide(context.Background(), recorded)
	if err != nil || own.Allow || !slices.ContainsFunc(own.Violations, func(f api.Finding) bool {
		return f.Code == "DP_COMM_BOUND"
	}) {
		t.Fatalf("with its own facts: %+v %v", own, err)
	}
	if _, ok := recorded["facts"].(map[string]any)["parallelism"]; !ok {
		t.Fatal("OwnFacts changed the recorded input")
	}
}
