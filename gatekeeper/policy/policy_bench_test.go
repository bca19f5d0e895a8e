//go:build unix

package policy_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/policies"
)

// BenchmarkDecideCPU is BenchmarkDecide reporting the process CPU time per
// evaluation (cpu-ns/op, garbage collection on the other core included),
// which other processes on a shared machine do not inflate. It is the
// "OPA eval" term of the per-request CPU target in docs/performance.md.
// limits-allow and limits-deny are the manifests at the schema's limits
// (limits_test.go): their cost against llama3-8b's is the size bound.
func BenchmarkDecideCPU(b *testing.B) {
	for _, name := range append([]string{"llama3-8b", "llama2-70b-v100-fsdp"}, limitsKinds...) {
		b.Run(name, func(b *testing.B) {
			e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle(), Deadline: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			in := benchInput(b, name)
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				// the training facts are part of each decision's cost
				if _, err := e.Decide(context.Background(), admission.WithFactsCopy(in, e.Facts())); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func benchInput(b *testing.B, name string) map[string]any {
	if strings.HasPrefix(name, "limits-") {
		return limitsInput(b, name)
	}
	return input(b, name)
}
