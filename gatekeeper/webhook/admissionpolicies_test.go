package webhook_test

import (
	"encoding/json"
	"io/fs"
	"slices"
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
	if users == nil {
		return withModel(t, "controllers", nil)
	}
	return withModel(t, "controllers", map[string]any{"users": users})
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

// TestDeviceAnnotationsFollowTheBundle: itogate-pod-device-annotations'
// devicePrefixes and deviceKeys are the bundle's device_annotation_prefixes
// and device_annotation_keys, each prefix also a key without its trailing
// slash (as the policy's _device_annotation reads them), sorted, without
// duplicates, as CEL string literals; a bundle listing neither, an empty
// entry or a name that is not printable ASCII is an error, never a policy
// that guards less than the webhook refuses by accident.
func TestDeviceAnnotationsFollowTheBundle(t *testing.T) {
	bundle := withModel(t, "device_annotation_prefixes", []any{"z.example/", "cdi.k8s.io/", "o'x.example/", "cdi.k8s.io/"})
	raw, err := fs.ReadFile(bundle, webhook.ResourceModelPath)
	if err != nil {
		t.Fatal(err)
	}
	var model map[string]any
	if err := json.Unmarshal(raw, &model); err != nil {
		t.Fatal(err)
	}
	model["device_annotation_keys"] = []any{"io.kubernetes.cri-o.Devices", "cdi.k8s.io"}
	if raw, err = json.Marshal(model); err != nil {
		t.Fatal(err)
	}
	bundle = fstest.MapFS{webhook.ResourceModelPath: {Data: raw}}
	out, err := webhook.AdmissionPolicies(deploy.AdmissionPolicies, bundle)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- name: devicePrefixes\n      expression: \"['cdi.k8s.io/', 'o\\\\'x.example/', 'z.example/']\"\n",
		"- name: deviceKeys\n      expression: \"['cdi.k8s.io', 'io.kubernetes.cri-o.Devices', 'o\\\\'x.example', 'z.example']\"\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the generated policies do not hold %q:\n%s", want, out)
		}
	}
	// The embedded bundle's lists, as the policy reads them.
	prefixes, keys, err := webhook.DeviceAnnotations(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(prefixes, "nvidia.cdi.k8s.io/") || !slices.Contains(keys, "io.kubernetes.cri-o.Devices") ||
		!slices.Contains(keys, "devices.nri.io") || slices.Contains(keys, "devices.nri.io/") {
		t.Fatalf("embedded device annotations: prefixes %v, keys %v", prefixes, keys)
	}
	for name, tc := range map[string]struct {
		bundle fs.FS
		want   string
	}{
		"neither list": {func() fs.FS {
			m := map[string]any{}
			_ = json.Unmarshal(raw, &m)
			delete(m, "device_annotation_prefixes")
			delete(m, "device_annotation_keys")
			b, _ := json.Marshal(m)
			return fstest.MapFS{webhook.ResourceModelPath: {Data: b}}
		}(), "lists no device_annotation_prefixes or device_annotation_keys"},
		"a prefix not printable": {withModel(t, "device_annotation_prefixes", []any{"cdi.k8s.io/\n"}), "device annotation prefix"},
		"an empty prefix":        {withModel(t, "device_annotation_prefixes", []any{"cdi.k8s.io/", ""}), "an empty device_annotation_prefixes entry"},
		"an empty key":           {withModel(t, "device_annotation_keys", []any{""}), "an empty device_annotation_keys entry"},
		"a key not printable":    {withModel(t, "device_annotation_keys", []any{"dev\u00e9"}), "device annotation key"},
	} {
		if _, err := webhook.AdmissionPolicies(deploy.AdmissionPolicies, tc.bundle); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
}
