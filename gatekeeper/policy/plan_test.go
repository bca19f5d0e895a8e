package policy_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

var planNow = time.Unix(1764403200, 0)

func readManifest(t testing.TB, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := manifest.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func allowed(d policy.Decision) bool { return d.Allow }

// TestPlanPublishedRecipes: for the published recipes (fixtures/manifests,
// each with its source), `itogate plan` returns the published layout within
// the top three, or three layouts each cheaper by its own estimates than
// the published one (whose rank and figures the answer carries, and each
// plan's explanation compares against); and every proposed manifest is
// admitted by a decision made afresh as `itogate eval` makes it.
func TestPlanPublishedRecipes(t *testing.T) {
	e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle(), Deadline: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x22b-nemo", "deepseek-v3-nemo"} {
		t.Run(name, func(t *testing.T) {
			doc := readManifest(t, name)
			res, err := e.Plan(context.Background(), doc, scenario.OfflinePlanInput(doc, nil, planNow), allowed)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Plans) < 3 {
				t.Fatalf("%d plans, want at least 3", len(res.Plans))
			}
			published := res.ManifestLayout
			for _, p := range res.Plans[:3] {
				t.Logf("plan %d: %+v\n  %s", p.Rank, p.Layout, p.Explanation)
			}
			inTop := false
			for _, p := range res.Plans[:3] {
				if p.Layout == published.Layout {
					inTop = true
				}
			}
			if !inTop && published.Figures != nil {
				mine := published.Figures.StepSeconds * float64(published.Figures.World)
				for _, p := range res.Plans[:3] {
					if cost := p.Estimates.StepSeconds * float64(p.Estimates.WorldSize); cost > mine+0.01*float64(p.Estimates.WorldSize) {
						t.Errorf("plan %d costs %.2f GPU-s per step, more than the published layout's %.2f, yet ranks above it", p.Rank, cost, mine)
					}
				}
			}
			if !inTop && published.Figures == nil {
				t.Logf("the published layout fails a hard rule or the memory margin by the model")
			}
			for _, p := range res.Plans {
				raw, err := json.Marshal(p.Manifest)
				if err != nil {
					t.Fatal(err)
				}
				m, err := manifest.Parse(raw)
				if err != nil {
					t.Fatalf("plan %d: the proposed manifest is not valid: %v", p.Rank, err)
				}
				in := scenario.OfflineInput(raw, m, scenario.ExactEntitlementClaims(doc, planNow), nil, planNow, e.Facts())
				d, err := e.Decide(context.Background(), in)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allow {
					t.Errorf("plan %d's manifest is denied: %v", p.Rank, d.Violations)
				}
				for _, w := range d.Warnings {
					if w.Code == "MEMORY_ESTIMATE_EXCEEDS_GPU" {
						t.Errorf("plan %d's manifest is above the memory margin: %s", p.Rank, w.Message)
					}
				}
				if p.Estimates.MemoryGBPerGPU > p.Estimates.GPUMemoryGB || p.Estimates.MemoryMarginGB < 0 {
					t.Errorf("plan %d: memory %v GB, margin %v GB", p.Rank, p.Estimates.MemoryGBPerGPU, p.Estimates.MemoryMarginGB)
				}
			}
		})
	}
}

// TestFixPastItsBudget: a search stopped by its budget says so in the fix,
// and the deny keeps its codes (never a timeout because of the fix).
func TestFixPastItsBudget(t *testing.T) {
	bundle := editedPlanConfig(t, `"max_candidates": 200000`, `"max_candidates": 1`)
	e, err := policy.New(context.Background(), policy.Options{Bundle: bundle, Deadline: patience.Deadline})
	if err != nil {
		t.Fatal(err)
	}
	doc := readManifest(t, "llama3-8b")
	doc["parallelism"].(map[string]any)["tensor"] = json.Number("16")
	doc["parallelism"].(map[string]any)["data"] = json.Number("4")
	raw, _ := json.Marshal(doc)
	d, err := e.Decide(context.Background(), scenario.OfflineInput(raw, doc, nil, nil, planNow, e.Facts()))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, v := range d.Violations {
		if v.Code == "TP_EXCEEDS_NVLINK_DOMAIN" {
			found = true
			if want := "the layout search stopped at its budget of 1 layouts on 8 × 8 A100-80GB before finding one that passes. Or: "; len(v.Fix) < len(want) || v.Fix[:len(want)] != want {
				t.Errorf("fix %q, want it to start %q", v.Fix, want)
			}
		}
	}
	if !found || d.Allow {
		t.Fatalf("decision %+v, want TP_EXCEEDS_NVLINK_DOMAIN", d.Violations)
	}
	fix, _ := d.Estimates["fix_layout"].(map[string]any)
	if fix["budget_exceeded"] != true {
		t.Errorf("fix_layout %v, want budget_exceeded", fix)
	}
}

// TestFixIsConfirmedAndNearest: a deny's fix on the booked hardware is
// the nearest layout (one changed knob here), admitted by the same rules
// and within the memory margin, and the best layout comes with it.
func TestFixIsConfirmedAndNearest(t *testing.T) {
	e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle(), Deadline: patience.Deadline})
	if err != nil {
		t.Fatal(err)
	}
	doc := readManifest(t, "llama3-8b")
	doc["parallelism"].(map[string]any)["tensor"] = json.Number("16")
	delete(doc["parallelism"].(map[string]any), "data")
	raw, _ := json.Marshal(doc)
	d, err := e.Decide(context.Background(), scenario.OfflineInput(raw, doc, nil, nil, planNow, e.Facts()))
	if err != nil {
		t.Fatal(err)
	}
	fix, _ := d.Estimates["fix_layout"].(map[string]any)
	if fix["on_booked_hardware"] != true || fix["changed_knobs"] != json.Number("1") {
		t.Fatalf("fix_layout %v, want one change on the booked hardware", fix)
	}
	if _, ok := fix["best"].(map[string]any); !ok {
		t.Errorf("fix_layout %v without its best layout", fix)
	}
	// the fixed manifest: admitted by the whole decision, within the margin
	par := doc["parallelism"].(map[string]any)
	for _, k := range []string{"tensor", "pipeline", "context", "expert", "virtual_stages", "zero_stage", "activation_checkpointing", "precision"} {
		par[k] = fix[k]
	}
	par["data"] = fix["data"]
	doc["objective"].(map[string]any)["micro_batch_size"] = fix["micro_batch_size"]
	raw, _ = json.Marshal(doc)
	again, err := e.Decide(context.Background(), scenario.OfflineInput(raw, doc, nil, nil, planNow, e.Facts()))
	if err != nil {
		t.Fatal(err)
	}
	if !again.Allow || len(again.Warnings) > 0 {
		t.Errorf("the fixed manifest: allow %v, violations %v, warnings %v; want a clean allow", again.Allow, again.Violations, again.Warnings)
	}
	if again.Estimates["memory_gb_per_gpu"] != fix["memory_gb_per_gpu"] {
		t.Errorf("the fixed manifest needs %v GB per GPU, the fix said %v", again.Estimates["memory_gb_per_gpu"], fix["memory_gb_per_gpu"])
	}
}

func editedPlanConfig(t *testing.T, old, replacement string) fs.FS {
	t.Helper()
	return bundletest.Edited(t, policies.Bundle(), "ito/config/plan/data.json", old, replacement)
}
