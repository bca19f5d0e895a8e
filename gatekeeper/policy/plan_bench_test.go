//go:build unix

package policy_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/policies"
)

// BenchmarkPlan405B is one plan for Llama 3 405B over 2 048 H100 (256
// nodes of 8; the llama3-405b fixture with the Llama 3 paper's 2 048
// sequences of 8 192 tokens per step and a budget
// ceiling that covers 2 048 GPUs): the search and the full decisions
// that admit its plans, reporting the process CPU per plan (cpu-ns/op).
// The goal is under one second.
func BenchmarkPlan405B(b *testing.B) {
	e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle(), Deadline: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	doc := readManifest(b, "llama3-405b")
	doc["hardware"].(map[string]any)["nodes"] = json.Number("256")
	doc["objective"].(map[string]any)["global_batch_size"] = json.Number("2048")
	delete(doc["parallelism"].(map[string]any), "data")
	doc["budget"].(map[string]any)["ceiling_usd"] = "100000.00" // 2 048 GPUs for the fixture's hours
	build := scenario.OfflinePlanInput(doc, nil, planNow)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		res, err := e.Plan(context.Background(), doc, build, allowed)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Plans) == 0 {
			b.Fatal("no plan")
		}
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}
