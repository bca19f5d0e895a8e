package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/itocompute/itogate/internal/patience"
)

// The evaluations here get patience.Deadline, not the server's 250 ms:
// what they test is the plans, on a machine of any speed and load.

// TestPlanThenEval: `itogate plan --json` on a published recipe (the
// Llama 3 70B torchtitan fixture, replanned on 4 nodes) prints ranked
// plans, and every proposed manifest, written to a file, is admitted by
// `itogate eval` (exit 0) with the same estimates of memory.
func TestPlanThenEval(t *testing.T) {
	const now = "1764403200"
	res := runCLI(t, "plan", "--manifest", "../../fixtures/manifests/llama3-70b.json", "--nodes", "4", "--now", now, "--json",
		"--deadline", patience.Deadline.String())
	if res.exit != 0 {
		t.Fatalf("plan: exit %d\n%s%s", res.exit, res.stdout, res.stderr)
	}
	var out struct {
		Plans []struct {
			Rank      int `json:"rank"`
			Estimates struct {
				WorldSize int     `json:"world_size"`
				MemoryGB  float64 `json:"memory_gb_per_gpu"`
			} `json:"estimates"`
			Manifest map[string]any `json:"manifest"`
		} `json:"plans"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Plans) < 3 {
		t.Fatalf("%d plans, want at least 3", len(out.Plans))
	}
	dir := t.TempDir()
	for _, p := range out.Plans {
		if p.Estimates.WorldSize != 32 {
			t.Errorf("plan %d on %d GPUs, want the 4 nodes asked for", p.Rank, p.Estimates.WorldSize)
		}
		raw, err := json.Marshal(p.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "plan.json")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		ev := runCLI(t, "eval", "--manifest", path, "--now", now, "--json", "--deadline", patience.Deadline.String())
		if ev.exit != 0 {
			t.Errorf("plan %d: eval exit %d\n%s", p.Rank, ev.exit, ev.stdout)
			continue
		}
		var d struct {
			Decision struct {
				Estimates map[string]any `json:"estimates"`
			} `json:"decision"`
		}
		if err := json.Unmarshal([]byte(ev.stdout), &d); err != nil {
			t.Fatal(err)
		}
		if got := d.Decision.Estimates["memory_gb_per_gpu"]; got != p.Estimates.MemoryGB {
			t.Errorf("plan %d: eval estimates %v GB per GPU, the plan %v", p.Rank, got, p.Estimates.MemoryGB)
		}
	}
}

// TestPlanBadInput: a negative node count is bad input (exit 4), and a
// booking no layout fits is exit 2.
func TestPlanBadInput(t *testing.T) {
	if res := runCLI(t, "plan", "--manifest", "../../fixtures/manifests/llama3-8b.json", "--nodes", "-1"); res.exit != exitFailed {
		t.Errorf("--nodes -1: exit %d, want %d\n%s", res.exit, exitFailed, res.stderr)
	}
	// 405B on one node: no layout holds its states there, nor on the few
	// node counts probed above the least that could
	res := runCLI(t, "plan", "--manifest", "../../fixtures/manifests/llama3-405b.json", "--nodes", "1", "--json",
		"--deadline", patience.Deadline.String())
	if res.exit != exitDenied {
		t.Errorf("405B on one node: exit %d, want %d\n%s", res.exit, exitDenied, res.stdout)
	}
}
