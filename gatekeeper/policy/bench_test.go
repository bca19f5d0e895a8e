package policy_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/policies"
)

// input builds the policy input the server would for a fixture manifest,
// without its training facts: a benchmark adds them per decision
// (admission.WithFactsCopy), as the server does.
func input(b testing.TB, name string) map[string]any {
	raw, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifests", name+".json"))
	if err != nil {
		b.Fatal(err)
	}
	doc, err := manifest.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	return scenario.OfflineInput(raw, doc, nil, nil, time.Unix(1764403200, 0), nil)
}

// BenchmarkDecide measures one evaluation of the embedded bundle per fixture:
// an allow (llama3-8b) and a deny that computes a fix (llama2-70b on V100).
func BenchmarkDecide(b *testing.B) {
	for _, name := range []string{"llama3-8b", "llama2-70b-v100-fsdp", "gpt3-175b-megatron"} {
		b.Run(name, func(b *testing.B) {
			e, err := policy.New(context.Background(), policy.Options{Bundle: policies.Bundle(), Deadline: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			in := input(b, name)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Decide(context.Background(), admission.WithFactsCopy(in, e.Facts())); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
