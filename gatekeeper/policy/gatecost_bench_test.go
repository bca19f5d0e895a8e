//go:build unix

package policy_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/policies"
	"github.com/open-policy-agent/opa/v1/rego"
)

// BenchmarkDecidePhases splits BenchmarkDecideCPU's decision in two: the
// training facts in Go (for a deny, with the fix search and the Rego
// confirmation of the proposed layout) and Decide on the finished input
// (its conversion, the evaluation, reading the result).
func BenchmarkDecidePhases(b *testing.B) {
	for _, name := range []string{"llama3-8b", "llama2-70b-v100-fsdp"} {
		e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle(), Deadline: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		in := input(b, name)
		b.Run(name+"/facts", func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				admission.WithFactsCopy(in, e.Facts())
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
		full := admission.WithFactsCopy(in, e.Facts())
		b.Run(name+"/decide", func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				if _, err := e.Decide(context.Background(), full); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkGateEval evaluates each gate's rules alone on the llama3-8b
// allow and the llama2-70b-v100-fsdp deny inputs with their training facts
// (the deny also its fix's layout, summary and text), each query compiled
// as an Engine compiles its own (policy.Compile: bundle data read as AST
// values). `opa bench` on the bundle directory converts bundle data from
// Go values on every evaluation, so it overstates rules that read tables (the manifest
// gate's field list: 969 allocations there, 342 here); this is the cost
// itogate pays. Gates share helper rules, so the parts sum to more than
// the decision.
func BenchmarkGateEval(b *testing.B) {
	bundle, _, err := policy.ReadFS(policies.Bundle())
	if err != nil {
		b.Fatal(err)
	}
	e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle(), Deadline: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	gates := []string{"admission.decision",
		"parallelism.deny", "parallelism.warn", "parallelism.estimates", "checkpoint.deny", "checkpoint.warn",
		"checkpoint.estimates", "budget.deny", "budget.estimates", "entitlement.deny", "confirmation.deny",
		"booking.deny", "booking.estimates", "datasets.deny", "datasets.warn", "manifest.deny", "lifecycle.deny",
		"idempotency.deny", "datachecks.deny", "rlvr.deny", "system.log.mask"}
	// the deny's fix as the decision shows it (defined only with a fix)
	fixParts := []string{"parallelism._fix_layout", "parallelism._fix_summary", "parallelism._fix_text"}
	prepare, err := policy.Compile(context.Background(), bundle)
	if err != nil {
		b.Fatal(err)
	}
	queries := map[string]rego.PreparedEvalQuery{}
	for _, gate := range append(slices.Clone(gates), fixParts...) {
		q, err := prepare("x := data.ito." + gate)
		if err != nil {
			b.Fatal(err)
		}
		queries[gate] = q
	}
	for _, tc := range []struct {
		fixture string
		gates   []string
	}{{"llama3-8b", gates}, {"llama2-70b-v100-fsdp", append(slices.Clone(gates), fixParts...)}} {
		in, err := policy.InputValue(admission.WithFactsCopy(input(b, tc.fixture), e.Facts()))
		if err != nil {
			b.Fatal(err)
		}
		for _, gate := range tc.gates {
			q := queries[gate]
			b.Run(tc.fixture+"/"+gate, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					rs, err := q.Eval(context.Background(), rego.EvalParsedInput(in))
					if err != nil || len(rs) != 1 {
						b.Fatalf("%s: %d results, %v", gate, len(rs), err)
					}
				}
			})
		}
	}
}
