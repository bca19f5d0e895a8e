package plan

import (
	"encoding/json"
	"errors"
	"os"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/policies"
)

func bundleData(t *testing.T) map[string]any {
	t.Helper()
	loader, err := bundle.NewFSLoader(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	b, err := bundle.NewCustomReader(loader).WithRegoVersion(ast.RegoV1).Read()
	if err != nil {
		t.Fatal(err)
	}
	return b.Data
}

func fixture(t *testing.T, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("../../fixtures/manifests/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestNewReadsEveryBoundFromTheBundle: a bundle without the planner's
// data has none (ErrNoData); one with a bound of another type is refused
// (ErrData).
func TestNewReadsEveryBoundFromTheBundle(t *testing.T) {
	data := bundleData(t)
	if _, err := New(data); err != nil {
		t.Fatal(err)
	}
	cfg := data["ito"].(map[string]any)["config"].(map[string]any)
	plan := cfg["plan"]
	delete(cfg, "plan")
	if _, err := New(data); !errors.Is(err, ErrNoData) {
		t.Errorf("without data.ito.config.plan: %v, want ErrNoData", err)
	}
	cfg["plan"] = plan
	plan.(map[string]any)["max_candidates"] = "many"
	if _, err := New(data); !errors.Is(err, ErrData) {
		t.Errorf("max_candidates a string: %v, want ErrData", err)
	}
}

// TestSearchKeepsToItsRules: every candidate passes the search's own hard
// rules and memory margin, keeps the model, batch and sequence, and a Fix
// search ranks fewest changed knobs first; the manifest's own layout (an
// allowed fixture's) is a candidate at distance 0.
func TestSearchKeepsToItsRules(t *testing.T) {
	p, err := New(bundleData(t))
	if err != nil {
		t.Fatal(err)
	}
	m := fixture(t, "llama3-70b")
	res := p.Search(m, Fix)
	if !res.Searchable || !res.OnBookedHardware || len(res.Candidates) == 0 {
		t.Fatalf("search: %+v", res)
	}
	if got := res.Candidates[0]; got.Distance != 0 || got.Layout != res.Manifest {
		t.Errorf("nearest %+v at distance %d, want the manifest's own layout", got.Layout, got.Distance)
	}
	pr := p.newProblem(m)
	for i, c := range res.Candidates {
		if !p.structural(&pr, c.Layout) || !p.passes(&pr, c.Layout, c.Figures) {
			t.Fatalf("candidate %+v fails the search's own rules", c.Layout)
		}
		if c.Figures.MemoryGB > p.cfg.memoryWarnFraction*pr.gpu.memoryGB {
			t.Fatalf("candidate %+v above the memory margin", c.Layout)
		}
		if i > 0 && res.Candidates[i-1].Distance > c.Distance {
			t.Fatalf("candidates out of distance order at %d", i)
		}
	}
	if fails, ok := p.ManifestFails(m); fails || !ok {
		t.Errorf("ManifestFails(llama3-70b) = %v, %v; want false, true", fails, ok)
	}
}

// TestApplyWritesTheLayout: Apply writes every knob and the data-parallel
// degree into a deep copy, leaving the input manifest unchanged.
func TestApplyWritesTheLayout(t *testing.T) {
	m := fixture(t, "llama3-8b")
	before, _ := json.Marshal(m)
	l := Layout{Nodes: 4, TP: 2, PP: 2, CP: 1, EP: 1, ETP: 1, V: 2, MBS: 2, Zero: 1, Checkpointing: "full", Precision: "bf16", Schedule: "interleaved"}
	out := Apply(m, l)
	after, _ := json.Marshal(m)
	if string(before) != string(after) {
		t.Error("Apply changed its input")
	}
	par := out["parallelism"].(map[string]any)
	want := map[string]any{"tensor": json.Number("2"), "pipeline": json.Number("2"), "virtual_stages": json.Number("2"),
		"zero_stage": json.Number("1"), "activation_checkpointing": "full", "data": json.Number("8")}
	for k, v := range want {
		if par[k] != v {
			t.Errorf("parallelism.%s = %v, want %v", k, par[k], v)
		}
	}
	if out["hardware"].(map[string]any)["nodes"] != json.Number("4") || out["objective"].(map[string]any)["micro_batch_size"] != json.Number("2") {
		t.Errorf("nodes or micro batch not written: %v %v", out["hardware"], out["objective"])
	}
	if _, declared := par["pipeline_schedule"]; declared {
		t.Error("a schedule the manifest did not declare was written")
	}
}
