package policy

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/itocompute/itogate/policies"
)

// TestReadReviewKeys: only input.review.keys.<constant> narrows the names
// given to the policy; every read the scan cannot follow keeps them all.
func TestReadReviewKeys(t *testing.T) {
	cases := []struct {
		name, body string
		all        bool
		names      []string
	}{
		{"constants", "a if input.review.keys.env == true\nb if input.review.keys[\"hostPath\"]\nc if input.review.object.spec", false, []string{"env", "hostPath"}},
		{"other parts only", "a if input.review.object.spec.containers\nb if input.ticket.verified", false, nil},
		{"nested in a data ref", "a if data.x[input.review.keys.privileged]", false, []string{"privileged"}},
		{"variable key", "a if { some k; input.review.keys[k] }", true, nil},
		{"keys as a whole", "a if count(input.review.keys) > 0", true, nil},
		{"review as a whole", "a if { r := input.review; r.keys.env }", true, nil},
		{"variable review step", "a if { some k; input.review[k] }", true, nil},
		{"variable top step", "a if { some k; input[k] }", true, nil},
		{"bare input", "a if f(input)\nf(x) if x", true, nil},
		{"import of input.review", "import input.review\na if review.keys.env", true, nil},
		{"import of input", "import input\na if input.review.keys.env", true, nil},
		{"object.get of a constant member", "a if object.get(input.review, \"user\", \"\")\nb if object.get(input.review, [\"keys\", \"env\"], false)", false, []string{"env"}},
		{"object.get of keys", "a if object.get(input.review, \"keys\", {})", true, nil},
		{"object.get of a variable member", "a if { some k; object.get(input.review, k, 0) }", true, nil},
		{"object.get of a variable path", "a if { some k; object.get(input.review, [k], 0) }", true, nil},
		{"object.get of a variable key", "a if { some k; object.get(input.review, [\"keys\", k], 0) }", true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := readReviewKeys(modules(t, "package p\n"+c.body), "data.p.decision")
			got := slices.Sorted(maps.Keys(k.names))
			if k.all != c.all || (!c.all && !slices.Equal(got, c.names)) {
				t.Errorf("all=%v names=%v, want all=%v names=%v", k.all, got, c.all, c.names)
			}
		})
	}
}

// TestShippedBundleReviewKeys: the shipped workload rules test six member
// names, and DecideWorkload gives exactly those of them the object has.
func TestShippedBundleReviewKeys(t *testing.T) {
	b, _, err := ReadFS(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	k := readReviewKeys(b, WorkloadQuery)
	want := []string{"env", "hostPath", "privileged", "resourceClaimName", "terminationGracePeriodSeconds", "volumeMounts"}
	if got := slices.Sorted(maps.Keys(k.names)); k.all || !slices.Equal(got, want) {
		t.Fatalf("all=%v names=%v, want %v", k.all, got, want)
	}
	obj := map[string]any{
		"metadata": map[string]any{"name": "p"},
		"spec": map[string]any{"containers": []any{map[string]any{
			"name": "t", "env": []any{map[string]any{"name": "A", "value": "b"}},
			"securityContext": map[string]any{"privileged": true},
		}}},
	}
	got := k.of(obj)
	if len(got) != 2 || got["env"] != true || got["privileged"] != true {
		t.Errorf("keys of the object = %v, want env and privileged", got)
	}
	if all := (reviewKeys{all: true}).of(obj); len(all) != 8 {
		t.Errorf("every name = %v, want 8", all)
	}
}

// TestReadReviewKeysReach: the modules the query's package reaches are
// scanned, through imports and data references; the others are not.
func TestReadReviewKeysReach(t *testing.T) {
	b := modules(t,
		"package w\nimport data.lib\nd if lib.f(1)",
		"package w.sub\na if input.review.keys.env",
		"package lib\nf(x) if input.review.keys.hostPath",
		"package other\nz if input.whatever[input.review.keys.privileged]\ny if count(input) > 0",
		"package deep\nq if data.w2.r",
		"package w2\nr if input.review.keys.resourceClaimName",
	)
	k := readReviewKeys(b, "data.w.d")
	if got := slices.Sorted(maps.Keys(k.names)); k.all || !slices.Equal(got, []string{"env", "hostPath"}) {
		t.Errorf("all=%v names=%v, want env and hostPath", k.all, got)
	}
	// A reference to an ancestor package reaches every package below it.
	b = modules(t, "package w\nd if data.w2", "package w2\nr if input.review.keys.resourceClaimName")
	if k := readReviewKeys(b, "data.w.d"); k.all || !k.names["resourceClaimName"] {
		t.Errorf("all=%v names=%v, want resourceClaimName", k.all, k.names)
	}
}

func modules(t *testing.T, srcs ...string) *bundle.Bundle {
	t.Helper()
	b := &bundle.Bundle{}
	for i, src := range srcs {
		m, err := ast.ParseModuleWithOpts("m.rego", src, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Fatalf("module %d: %v", i, err)
		}
		b.Modules = append(b.Modules, bundle.ModuleFile{Path: fmt.Sprintf("m%d.rego", i), Parsed: m})
	}
	return b
}
