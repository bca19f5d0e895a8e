package policy_test

import (
	"testing"

	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/policies"
)

// BenchmarkFacts is the Go side of a decision's cost: the training facts
// of a fixture (trainfacts.Model.Compute), part of BenchmarkDecideCPU.
func BenchmarkFacts(b *testing.B) {
	bun, _, err := policy.ReadFS(policies.Bundle())
	if err != nil {
		b.Fatal(err)
	}
	m, err := trainfacts.New(bun.Data)
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"llama3-8b", "llama2-70b-v100-fsdp"} {
		b.Run(name, func(b *testing.B) {
			in := input(b, name)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Compute(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
