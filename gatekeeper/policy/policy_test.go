package policy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/trainfacts"
	"github.com/itocompute/itogate/policies"

	"github.com/itocompute/itogate/internal/patience"
)

func bundleOf(decision string) fstest.MapFS {
	return fstest.MapFS{
		"ito/admission/admission.rego": {Data: []byte("package ito.admission\n\n" + decision + "\n")},
	}
}

func TestDecideValidatesTheDecision(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		rego     string
		deadline time.Duration
		want     api.Code // code, or "" for a valid decision
		allow    bool
	}{
		{"allow", `decision := {"allow": true, "violations": [], "warnings": []}`, 0, "", true},
		{"deny", `decision := {"allow": false, "violations": [{"code": "X", "gate": "g", "message": "m"}]}`, 0, "", false},
		{"undefined", `decision := d if { d := {"allow": true}; input.never }`, 0, api.CodePolicyDecisionInvalid, false},
		{"misspelt entrypoint", `decison := {"allow": true, "violations": []}`, 0, api.CodePolicyDecisionInvalid, false},
		{"not an object", `decision := true`, 0, api.CodePolicyDecisionInvalid, false},
		{"allow is a string", `decision := {"allow": "true", "violations": []}`, 0, api.CodePolicyDecisionInvalid, false},
		{"allow without violations field", `decision := {"allow": true}`, 0, api.CodePolicyDecisionInvalid, false},
		{"allow with violations", `decision := {"allow": true, "violations": [{"code": "X", "gate": "g", "message": "m"}]}`, 0, api.CodePolicyDecisionInvalid, false},
		{"deny without violations", `decision := {"allow": false, "violations": []}`, 0, api.CodePolicyDecisionInvalid, false},
		{"violation without code", `decision := {"allow": false, "violations": [{"gate": "g"}]}`, 0, api.CodePolicyDecisionInvalid, false},
		{"deny with a halt", `decision := {"allow": false, "violations": [{"code": "X", "gate": "g", "message": "m"}], "halt": {"failed_evals": ["mmlu_5shot"]}}`, 0, "", false},
		{"halt on an allow", `decision := {"allow": true, "violations": [], "halt": {"failed_evals": ["mmlu_5shot"]}}`, 0, api.CodePolicyDecisionInvalid, false},
		{"halt without evals", `decision := {"allow": false, "violations": [{"code": "X", "gate": "g", "message": "m"}], "halt": {"failed_evals": []}}`, 0, api.CodePolicyDecisionInvalid, false},
		{"halt naming no eval", `decision := {"allow": false, "violations": [{"code": "X", "gate": "g", "message": "m"}], "halt": {"failed_evals": ["a, b"]}}`, 0, api.CodePolicyDecisionInvalid, false},
		{"halt of another shape", `decision := {"allow": false, "violations": [{"code": "X", "gate": "g", "message": "m"}], "halt": {"failed_evals": ["a"], "run": "x"}}`, 0, api.CodePolicyDecisionInvalid, false},
		{"runtime error", `decision := {"allow": 1 / input.zero == 1, "violations": []}`, 0, api.CodePolicyEvaluationFailed, false},
		{"conflict error", "decision := {\"allow\": true, \"violations\": []} if input.a\ndecision := {\"allow\": false, \"violations\": []} if input.a", 0, api.CodePolicyEvaluationFailed, false},
		{"timeout", `decision := {"allow": count([x | some x in numbers.range(1, 100000000); x % 7 == 0]) > 0, "violations": []}`,
			20 * time.Millisecond, api.CodePolicyTimeout, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Only the timeout case, whose rule scans 10^8 numbers, races a
			// deadline; the others get one no machine can hit.
			deadline := tc.deadline
			if deadline == 0 {
				deadline = patience.Deadline
			}
			e, err := New(context.Background(), Options{Bundle: bundleOf(tc.rego), Deadline: deadline, SkipRequiredRules: true})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			d, err := e.Decide(context.Background(), map[string]any{"zero": 0, "a": true})
			if tc.want == "" {
				if err != nil || d.Allow != tc.allow {
					t.Fatalf("Decide = %+v, %v; want allow=%v", d, err, tc.allow)
				}
				if tc.name == "deny with a halt" && (d.Halt == nil || len(d.Halt.FailedEvals) != 1 || d.Halt.FailedEvals[0] != "mmlu_5shot") {
					t.Fatalf("Decide halt = %+v, want failed_evals [mmlu_5shot]", d.Halt)
				}
				return
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.Code != tc.want {
				t.Fatalf("Decide = %+v, %v; want code %s", d, err, tc.want)
			}
			if d.Allow {
				t.Fatal("an error must never come with allow")
			}
		})
	}
}

func TestBundleExcludesTestsAndRecordsRevision(t *testing.T) {
	t.Parallel()
	fsys := bundleOf(`decision := {"allow": true, "violations": []}`)
	// A test file that would make the bundle fail to compile if loaded.
	fsys["ito/admission/admission_test.rego"] = &fstest.MapFile{Data: []byte("package ito.admission_test\n\ntest_x if { syntax error")}
	fsys[".manifest"] = &fstest.MapFile{Data: []byte(`{"revision": "2026.11.29-1"}`)}
	e, err := New(context.Background(), Options{Deadline: patience.Deadline, Bundle: fsys, SkipRequiredRules: true})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if e.Revision() != "2026.11.29-1" {
		t.Fatalf("revision %q", e.Revision())
	}
	before := e.Digest()
	fsys["ito/admission/admission.rego"] = &fstest.MapFile{Data: []byte("package ito.admission\n\ndecision := {\"allow\": false, \"violations\": [{\"code\": \"X\", \"gate\": \"g\"}]}\n")}
	e2, err := New(context.Background(), Options{Deadline: patience.Deadline, Bundle: fsys, SkipRequiredRules: true})
	if err != nil {
		t.Fatal(err)
	}
	if e2.Digest() == before {
		t.Fatal("a changed policy must change the bundle digest")
	}
}

func TestViolationsAreSorted(t *testing.T) {
	t.Parallel()
	e, err := New(context.Background(), Options{Deadline: patience.Deadline, SkipRequiredRules: true, Bundle: bundleOf(`decision := {"allow": false, "violations": [
		{"code": "B", "gate": "g", "message": "2"}, {"code": "A", "gate": "g", "message": "1"}, {"code": "B", "gate": "g", "message": "1"}]}`)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.Decide(context.Background(), map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	got := string(d.Violations[0].Code) + string(d.Violations[1].Code) + d.Violations[1].Message + d.Violations[2].Message
	if got != "AB12" {
		t.Fatalf("order %v", d.Violations)
	}
}

// TestIncompleteBundleIsRefused: a bundle that lost a gate compiles in OPA
// (the reference is merely undefined) but must never be activated.
func TestIncompleteBundleIsRefused(t *testing.T) {
	t.Parallel()
	full := fstest.MapFS{}
	err := fs.WalkDir(policies.Bundle(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(policies.Bundle(), p)
		full[p] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), Options{Deadline: patience.Deadline, Bundle: full}); err != nil {
		t.Fatalf("the embedded bundle: %v", err)
	}
	for p := range full {
		if strings.HasPrefix(p, "ito/datasets/") {
			delete(full, p)
		}
	}
	_, err = New(context.Background(), Options{Deadline: patience.Deadline, Bundle: full})
	if err == nil || !strings.Contains(err.Error(), "no rule data.ito.datasets.deny") {
		t.Fatalf("New without the data gate = %v", err)
	}
}

// embeddedFS is a writable copy of the embedded bundle.
func embeddedFS(t *testing.T) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	err := fs.WalkDir(policies.Bundle(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(policies.Bundle(), p)
		out[p] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAnotherFactsModelIsRefused: a bundle that declares another
// training-facts model than trainfacts.Version, none, or a table the model
// reads with a figure of another type than a number, is refused by New
// (ErrFactsModel), so it is never activated; a hand-made bundle that skips
// the required rules and declares no model decides without input.facts.
func TestAnotherFactsModelIsRefused(t *testing.T) {
	t.Parallel()
	const facts = "ito/config/facts/data.json"
	for name, edit := range map[string]func(fstest.MapFS){
		"another version": func(f fstest.MapFS) {
			f[facts] = &fstest.MapFile{Data: fmt.Appendf(nil, `{"model_version": %d}`, trainfacts.Version+1)}
		},
		"version as string": func(f fstest.MapFS) { f[facts] = &fstest.MapFile{Data: []byte(`{"model_version": "1"}`)} },
		"no version":        func(f fstest.MapFS) { delete(f, facts) },
		"ill-typed table": func(f fstest.MapFS) {
			f["ito/tables/fabrics/data.json"] = &fstest.MapFile{Data: []byte(`{"ib": {"gbytes_per_s_per_gpu": "50"}}`)}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fsys := embeddedFS(t)
			edit(fsys)
			_, err := New(context.Background(), Options{Deadline: patience.Deadline, Bundle: fsys})
			if !errors.Is(err, ErrFactsModel) {
				t.Fatalf("New = %v, want ErrFactsModel", err)
			}
		})
	}
	e, err := New(context.Background(), Options{Bundle: bundleOf(`decision := {"allow": true, "violations": []}`),
		Deadline: patience.Deadline, SkipRequiredRules: true})
	if err != nil || e.Facts() != nil {
		t.Fatalf("a hand-made bundle without a facts model: %v, facts %v", err, e.Facts())
	}
	if d, err := e.Decide(context.Background(), map[string]any{}); err != nil || !d.Allow {
		t.Fatalf("Decide without facts = %+v, %v", d, err)
	}
}

// TestDecideChecksTheFacts: the engine decides only on training facts of
// the version its bundle declares; other facts, or none, fail closed with
// POLICY_FACTS_VERSION_MISMATCH before any Rego runs, and facts that carry
// a strict built-in error with POLICY_EVALUATION_FAILED.
func TestDecideChecksTheFacts(t *testing.T) {
	t.Parallel()
	e, err := New(context.Background(), Options{Deadline: patience.Deadline, Bundle: policies.Bundle()})
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]any{"request": map[string]any{"action": "train.create"}, "manifest": map[string]any{}}
	facts, err := e.Facts().Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		facts any
		want  api.Code
	}{
		{"its own", facts, ""},
		{"none", nil, api.CodePolicyFactsMismatch},
		{"another version", map[string]any{"version": trainfacts.Version + 1, "parallelism": map[string]any{}}, api.CodePolicyFactsMismatch},
		{"version as string", map[string]any{"version": "1"}, api.CodePolicyFactsMismatch},
		{"not an object", "facts", api.CodePolicyFactsMismatch},
		{"a formula's error", map[string]any{"version": trainfacts.Version, "error": "rem: modulo on floating-point number"}, api.CodePolicyEvaluationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := map[string]any{"request": in["request"], "manifest": in["manifest"]}
			if tc.facts != nil {
				doc["facts"] = tc.facts
			}
			d, err := e.Decide(context.Background(), doc)
			var pe *Error
			switch {
			case tc.want == "" && (err != nil || d.Allow):
				t.Fatalf("Decide = %+v, %v; want a deny of the empty manifest", d, err)
			case tc.want != "" && (!errors.As(err, &pe) || pe.Code != tc.want):
				t.Fatalf("Decide = %+v, %v; want %s", d, err, tc.want)
			}
		})
	}
}

// TestDecisionCarriesTheLogMask: the decision-log mask is evaluated in the
// same pass as the decision; a missing mask masks nothing, a malformed one
// is reported without touching the decision.
func TestDecisionCarriesTheLogMask(t *testing.T) {
	t.Parallel()
	const allow = `decision := {"allow": true, "violations": []}`
	cases := []struct {
		name    string
		mask    string // package ito.system.log; "" for none
		want    []string
		wantErr bool
	}{
		{"no mask rule", "", nil, false},
		{"set, sorted", "mask contains \"/b\"\nmask contains \"/a\" if input.a", []string{"/a", "/b"}, false},
		{"empty set", "mask contains \"/x\" if input.never", []string{}, false},
		{"undefined complete rule", "mask := {\"/x\"} if input.never", nil, false},
		{"not a set", `mask := "/manifest"`, nil, true},
		{"set of numbers", `mask := {1, 2}`, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fsys := bundleOf(allow)
			if tc.mask != "" {
				fsys["ito/system/log/log.rego"] = &fstest.MapFile{Data: []byte("package ito.system.log\n\n" + tc.mask + "\n")}
			}
			e, err := New(context.Background(), Options{Deadline: patience.Deadline, Bundle: fsys, SkipRequiredRules: true})
			if err != nil {
				t.Fatal(err)
			}
			d, err := e.Decide(context.Background(), map[string]any{"a": true})
			if err != nil || !d.Allow {
				t.Fatalf("Decide = %+v, %v: the mask must never change the decision", d, err)
			}
			if (d.LogMaskErr != nil) != tc.wantErr {
				t.Fatalf("LogMaskErr = %v, want error %v", d.LogMaskErr, tc.wantErr)
			}
			if strings.Join(d.LogMask, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("LogMask = %q, want %q", d.LogMask, tc.want)
			}
			paths, err := d.Mask(context.Background(), nil)
			if strings.Join(paths, ",") != strings.Join(tc.want, ",") || (err != nil) != tc.wantErr {
				t.Fatalf("Mask() = %q, %v", paths, err)
			}
		})
	}
}

// TestEmbeddedBundleMasks: the embedded bundle always masks the confirmation
// reference and masks the manifest when it holds a credential.
func TestEmbeddedBundleMasks(t *testing.T) {
	t.Parallel()
	e, err := New(context.Background(), Options{Deadline: patience.Deadline, Bundle: policies.Bundle()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		uri  string
		want string
	}{
		{"s3://ito-datasets/plain/", "/confirmation/ref"},
		{"https://user:hunter2@example.com/data/", "/confirmation/ref,/manifest"},
	} {
		in := map[string]any{"request": map[string]any{"action": "train.create"},
			"manifest": map[string]any{"data": []any{map[string]any{"uri": tc.uri}}}}
		facts, err := e.Facts().Compute(in)
		if err != nil {
			t.Fatal(err)
		}
		in["facts"] = facts
		d, err := e.Decide(context.Background(), in)
		if err != nil || d.Allow {
			t.Fatalf("Decide(%s) = %+v, %v; want a deny", tc.uri, d, err)
		}
		if got := strings.Join(d.LogMask, ","); got != tc.want || d.LogMaskErr != nil {
			t.Fatalf("LogMask for %s = %q (%v), want %q", tc.uri, got, d.LogMaskErr, tc.want)
		}
	}
}
