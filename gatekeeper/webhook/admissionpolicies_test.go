package webhook_test

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/itocompute/itogate/deploy"
	"github.com/itocompute/itogate/gatekeeper/webhook"
	"github.com/itocompute/itogate/policies"
)

// withControllers is the embedded bundle's resource model with
// controllers.users replaced by users (nil: the key removed).
func withControllers(t *testing.T, users map[string]string) fs.FS {
	t.Helper()
	raw, err := fs.ReadFile(policies.Bundle(), webhook.ResourceModelPath)
	if err != nil {
		t.Fatal(err)
	}
	var model map[string]any
	if err := json.Unmarshal(raw, &model); err != nil {
		t.Fatal(err)
	}
	if users == nil {
		delete(model, "controllers")
	} else {
		model["controllers"] = map[string]any{"users": users}
	}
	out, err := json.Marshal(model)
	if err != nil {
		t.Fatal(err)
	}
	return fstest.MapFS{webhook.ResourceModelPath: {Data: out}}
}

// TestAdmissionPoliciesFollowTheBundle: the controller identities of
// itogate-ticketed-pods are the bundle's controllers.users, sorted, as CEL
// string literals (a quote escaped); the rest of the file, comments
// included, is the template's; a bundle without controllers, an identity
// that is not printable ASCII or a template without the policy's variable
// is an error, never a policy that trusts nobody or everybody by accident.
func TestAdmissionPoliciesFollowTheBundle(t *testing.T) {
	out, err := webhook.AdmissionPolicies(deploy.AdmissionPolicies, withControllers(t, map[string]string{
		"system:serviceaccount:ml-ops:my-operator": "ours",
		"system:serviceaccount:a:o'brien":          "a quote",
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := `expression: "['system:serviceaccount:a:o\\'brien', 'system:serviceaccount:ml-ops:my-operator']"`
	if !strings.Contains(string(out), want) {
		t.Fatalf("the generated policies do not hold %s:\n%s", want, out)
	}
	if strings.Contains(string(out), "job-controller'") {
		t.Fatal("an identity of the embedded bundle survived")
	}
	for _, kept := range []string{"# itogate-ticketed-pods: a Pod carrying an admission ticket", "name: itogate-workload-delete",
		"name: itogate-namespace-labels"} {
		if !strings.Contains(string(out), kept) {
			t.Errorf("the template's %q is gone", kept)
		}
	}
	for name, tc := range map[string]struct {
		template []byte
		bundle   fs.FS
		want     string
	}{
		"no controllers":     {deploy.AdmissionPolicies, withControllers(t, nil), "lists no controllers.users"},
		"empty controllers":  {deploy.AdmissionPolicies, withControllers(t, map[string]string{}), "lists no controllers.users"},
		"not printable":      {deploy.AdmissionPolicies, withControllers(t, map[string]string{"sa\n": "x"}), "not printable ASCII"},
		"no such policy":     {[]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), policies.Bundle(), "found 0"},
		"not YAML":           {[]byte("a: [\n"), policies.Bundle(), "admission policies"},
		"no bundle model":    {deploy.AdmissionPolicies, fstest.MapFS{}, "controller identities"},
		"the variable twice": {append(append([]byte{}, deploy.AdmissionPolicies...), append([]byte("---\n"), policyDoc(t)...)...), policies.Bundle(), "found 2"},
	} {
		if _, err := webhook.AdmissionPolicies(tc.template, tc.bundle); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}

// policyDoc is the ticketed-pods policy document of the shipped file.
func policyDoc(t *testing.T) []byte {
	t.Helper()
	for _, doc := range strings.Split(string(deploy.AdmissionPolicies), "\n---\n") {
		if strings.Contains(doc, "kind: ValidatingAdmissionPolicy\n") && strings.Contains(doc, "name: "+webhook.TicketedPodsPolicy+"\n") {
			return []byte(doc)
		}
	}
	t.Fatal("no ticketed-pods policy in the shipped file")
	return nil
}

// withModel is the embedded bundle's resource model with key set to value
// (nil: the key removed).
func withModel(t *testing.T, key string, value any) fs.FS {
	t.Helper()
	raw, err := fs.ReadFile(policies.Bundle(), webhook.ResourceModelPath)
	if err != nil {
		t.Fatal(err)
	}
	var model map[string]any
	if err := json.Unmarshal(raw, &model); err != nil {
		t.Fatal(err)
	}
	if value == nil {
		delete(model, key)
	} else {
		model[key] = value
	}
	out, err := json.Marshal(model)
	if err != nil {
		t.Fatal(err)
	}
	return fstest.MapFS{webhook.ResourceModelPath: {Data: out}}
}

// TestPodDeletionGraceFollowsTheBundle: itogate-pod-deletion's
// maxGraceSeconds is the bundle's max_termination_grace_seconds, the bound
// the policy holds pod templates to; a bundle without one, or with one
// that is no count of seconds, is an error.
func TestPodDeletionGraceFollowsTheBundle(t *testing.T) {
	out, err := webhook.AdmissionPolicies(deploy.AdmissionPolicies, withModel(t, "max_termination_grace_seconds", 120))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "- name: maxGraceSeconds\n      expression: \"120\"\n") {
		t.Fatalf("maxGraceSeconds is not the bundle's 120:\n%s", out)
	}
	if n, err := webhook.MaxGraceSeconds(policies.Bundle()); err != nil || n != 600 {
		t.Fatalf("embedded bound %d, %v; want 600", n, err)
	}
	for name, v := range map[string]any{"absent": nil, "zero": 0, "negative": -30, "a fraction": 1.5, "a string": "600", "2^31": int64(1) << 31} {
		if _, err := webhook.AdmissionPolicies(deploy.AdmissionPolicies, withModel(t, "max_termination_grace_seconds", v)); err == nil ||
			!strings.Contains(err.Error(), "max grace seconds") {
			t.Errorf("%s: %v, want a max grace seconds error", name, err)
		}
	}
}
