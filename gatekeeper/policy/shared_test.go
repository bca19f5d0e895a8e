package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/policies"
)

// TestQueriesShareTheCompiledBundleConcurrently: an Engine prepares its
// queries on one compiled bundle and one store (the decision, the
// workload decision, the report verdict and, inside a deny's facts, the
// fix's confirmation). Evaluated at once from many goroutines, each answers
// exactly what it answers alone (under -race, the shared compiler and store
// show no data race).
func TestQueriesShareTheCompiledBundleConcurrently(t *testing.T) {
	e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle(), Deadline: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	deny, allow := input(t, "llama2-70b-v100-fsdp"), input(t, "llama3-8b")
	// DecideWorkload writes input.review.keys: each call has its own input
	workload := func() map[string]any {
		return map[string]any{"review": map[string]any{
			"operation": "CREATE", "kind": map[string]any{"group": "", "version": "v1", "kind": "Pod"},
			"namespace": "team-a", "object": map[string]any{
				"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p", "namespace": "team-a"},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x",
					"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": "8"}}}}},
			},
		}}
	}
	// one unverified report: a verdict with problems
	report := map[string]any{
		"eval_reports": []any{map[string]any{"claims": map[string]any{"kind": "eval_report"}}},
		"ledger":       map[string]any{}, "manifest": map[string]any{},
	}
	calls := []func() string{
		func() string { return answer(e.Decide(ctx, admission.WithFactsCopy(deny, e.Facts()))) },
		func() string { return answer(e.Decide(ctx, admission.WithFactsCopy(allow, e.Facts()))) },
		func() string { return answer(e.DecideWorkload(ctx, workload())) },
		func() string { return answer(e.JudgeReport(ctx, report)) },
	}
	want := make([]string, len(calls))
	for i, call := range calls {
		want[i] = call()
	}
	// the deny names a fix (its confirmation ran) and the allow allows
	var d policy.Decision
	if d, err = e.Decide(ctx, admission.WithFactsCopy(deny, e.Facts())); err != nil || d.Allow ||
		d.Estimates["fix_layout"] == nil {
		t.Fatalf("deny: allow %v, fix_layout %v, err %v", d.Allow, d.Estimates["fix_layout"], err)
	}
	if d, err = e.Decide(ctx, admission.WithFactsCopy(allow, e.Facts())); err != nil || !d.Allow {
		t.Fatalf("allow: %+v %v", d, err)
	}
	if v, err := e.JudgeReport(ctx, report); err != nil || len(v.Problems) == 0 {
		t.Fatalf("report verdict: %+v %v", v, err)
	}
	if w, err := e.DecideWorkload(ctx, workload()); err != nil || w.Bind != "root" || w.GPUs != 8 {
		t.Fatalf("workload: %+v %v", w, err)
	}
	const rounds = 4
	var wg sync.WaitGroup
	got := make([][]string, len(calls))
	for i := range calls {
		got[i] = make([]string, rounds)
		for r := range rounds {
			wg.Go(func() { got[i][r] = calls[i]() })
		}
	}
	wg.Wait()
	for i := range calls {
		for r := range rounds {
			if got[i][r] != want[i] {
				t.Errorf("call %d, round %d: concurrent answer differs from the sequential one:\n%s\nwant\n%s", i, r, got[i][r], want[i])
			}
		}
	}
}

// answer is a result (as JSON: map keys sorted) and its error as one
// comparable text.
func answer[T any](v T, err error) string {
	b, jerr := json.Marshal(v)
	return fmt.Sprintf("%s | %v | %v", b, err, jerr)
}
