package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/itocompute/itogate/internal/patience"
)

// TestFactsReferenceIsCheckedAtActivation: New refuses (ErrFactsModel) a
// bundle whose Rego reference computes other facts than Go's model on its
// sample inputs (data.ito.config.facts.samples), or none, naming the
// sample and the first fact that differs, and one without samples; a bundle without the reference activates unchecked; a bundle
// with an operator's own table rows activates, and each of its rows is on
// a sample.
func TestFactsReferenceIsCheckedAtActivation(t *testing.T) {
	t.Parallel()
	const parFacts = "ito/parallelism/facts.rego"
	for name, tc := range map[string]struct {
		edit func(t *testing.T, f fstest.MapFS)
		want string
	}{
		"a formula edited in Rego": {
			edit: func(t *testing.T, f fstest.MapFS) {
				replaceIn(t, f, parFacts, `_reference["dp"] := _dp(_manifest_layout)`,
					`_reference["dp"] := _dp(_manifest_layout) + 1`)
			},
			want: "sample deepseek-v3-megatron-bridge on gpu_type A10, fabric aws-efa-v1, storage_tier gcs-standard: Go's facts differ from data.ito.facts.reference at facts.parallelism.dp (Go 32, reference 33)",
		},
		"a figure the reference leaves out": {
			edit: func(t *testing.T, f fstest.MapFS) {
				replaceIn(t, f, parFacts, `_reference["dp"] := _dp(_manifest_layout)`,
					`_reference["dp"] := _dp(_manifest_layout) if false`)
			},
			want: "sample deepseek-v3-megatron-bridge on gpu_type A10, fabric aws-efa-v1, storage_tier gcs-standard: Go's facts differ from data.ito.facts.reference at facts.parallelism.dp (only in Go: 32)",
		},
		// the three below passed a check on the rows alone (a review's cases)
		"a storage tier's table figure edited (a tier no sample names)": {
			edit: func(t *testing.T, f fstest.MapFS) {
				replaceIn(t, f, "ito/checkpoint/facts.rego", `} else := _model_tier.write_gbytes_per_s_per_node`,
					`} else := _model_tier.write_gbytes_per_s_per_node * 2 if {
	_model_tier_name == "object-store-slow"
} else := _model_tier.write_gbytes_per_s_per_node`)
			},
			want: "storage_tier object-store-slow: Go's facts differ from data.ito.facts.reference at facts.checkpoint.",
		},
		"a stage advance's manifest edited": {
			edit: func(t *testing.T, f fstest.MapFS) {
				replaceIn(t, f, "ito/lib/lib.rego", `	{"objective": {"stage": stage}},
)`, `	{"objective": {"stage": stage}, "hardware": {"nodes": 1}},
)`)
			},
			want: "advancing into long_context: Go's facts differ",
		},
		"the credential scan emptied": {
			edit: func(t *testing.T, f fstest.MapFS) {
				replaceIn(t, f, "ito/datasets/facts.rego",
					`facts_reference := {"by_path": {path: sort(kinds) | some path, kinds in _credentials_by_path}}`,
					`facts_reference := {"by_path": {}}`)
			},
			want: "with telemetry, a secret-named key and an ill-typed field: Go's facts differ from data.ito.facts.reference at facts.credentials.by_path",
		},
		"no samples to check it on": {
			edit: func(t *testing.T, f fstest.MapFS) { delete(f, "ito/config/facts/samples/data.json") },
			want: "data.ito.config.facts.samples names no sample manifest to check the facts reference on",
		},
		"the reference undefined for a create": {
			edit: func(t *testing.T, f fstest.MapFS) {
				replaceIn(t, f, "ito/facts/facts.rego", "} if {\n\tlib.runs_training_gates\n}",
					"} if {\n\tlib.runs_training_gates\n\tinput.never\n}")
			},
			want: "sample deepseek-v3-megatron-bridge on gpu_type A10, fabric aws-efa-v1, storage_tier gcs-standard: data.ito.facts.reference is undefined",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fsys := embeddedFS(t)
			tc.edit(t, fsys)
			_, err := New(context.Background(), Options{Deadline: patience.Deadline, Bundle: fsys})
			if !errors.Is(err, ErrFactsModel) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v\nwant ErrFactsModel with %q", err, tc.want)
			}
		})
	}

	// a cancel is not a difference: activation does not depend on it
	t.Run("cancelled context", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := New(ctx, Options{Deadline: patience.Deadline, Bundle: embeddedFS(t)}); err != nil {
			t.Fatalf("New = %v", err)
		}
	})

	// a bundle without the formulas has nothing to hold Go's facts to: its
	// gates read them alone
	t.Run("no reference", func(t *testing.T) {
		t.Parallel()
		fsys := embeddedFS(t)
		delete(fsys, "ito/facts/facts.rego")
		if e, err := New(context.Background(), Options{Deadline: patience.Deadline, Bundle: fsys}); err != nil || e.Facts() == nil {
			t.Fatalf("New = %v", err)
		}
	})

	t.Run("an operator's own rows", func(t *testing.T) {
		t.Parallel()
		fsys := embeddedFS(t)
		replaceIn(t, fsys, "ito/tables/gpus/data.json", `{`, `{
  "X-80": {"memory_gb": 79.5, "peak_tflops_16bit": 812.25, "precisions": ["fp32", "bf16", "fp16", "fp8"],
    "arch": "sm_90", "nvlink_domain": 8, "intra_node_gbytes_per_s": 450.5},`)
		replaceIn(t, fsys, "ito/tables/fabrics/data.json", `{`, `{
  "x-fabric": {"gbytes_per_s_per_gpu": 37.5},`)
		e, err := New(context.Background(), Options{Deadline: patience.Deadline, Bundle: fsys})
		if err != nil || e.Facts() == nil {
			t.Fatalf("New = %v", err)
		}
		b, _, err := ReadFS(fsys)
		if err != nil {
			t.Fatal(err)
		}
		samples, err := factsSamples(b.Data)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range samples {
			names = append(names, s.name)
		}
		all := strings.Join(names, "\n")
		for _, row := range []string{"gpu_type X-80", "fabric x-fabric", "gpu_type H800", "storage_tier lustre"} {
			if !strings.Contains(all, row) {
				t.Errorf("no sample on %s:\n%s", row, all)
			}
		}
	})
}

func replaceIn(t *testing.T, f fstest.MapFS, name, old, new string) {
	t.Helper()
	file, ok := f[name]
	if !ok || !strings.Contains(string(file.Data), old) {
		t.Fatalf("%s has no %q", name, old)
	}
	f[name] = &fstest.MapFile{Data: []byte(strings.Replace(string(file.Data), old, new, 1))}
}
