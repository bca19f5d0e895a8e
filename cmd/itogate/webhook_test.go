package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/itocompute/itogate/deploy"
)

// TestWebhookConfig: without --bundle the command prints the shipped
// configuration; with a bundle directory whose resource model names
// another GPU resource, the generated conditions name it too.
func TestWebhookConfig(t *testing.T) {
	res := runCLI(t, "webhook", "config")
	if res.exit != 0 || res.stdout != string(deploy.WebhookConfiguration) {
		t.Fatalf("itogate webhook config: exit %d, stderr %s; want the shipped configuration", res.exit, res.stderr)
	}
	dir := copyPolicies(t, filepath.Join(t.TempDir(), "policies"))
	model := filepath.Join(dir, "ito", "config", "workload", "data.json")
	raw, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(raw), `"habana.ai/gaudi"`, `"habana.ai/gaudi", "example.com/npu"`, 1)
	if edited == string(raw) {
		t.Fatal("the model no longer names habana.ai/gaudi")
	}
	if err := os.WriteFile(model, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	res = runCLI(t, "webhook", "config", "--bundle", dir)
	if res.exit != 0 {
		t.Fatalf("exit %d: %s", res.exit, res.stderr)
	}
	if !strings.Contains(res.stdout, `"example.com/npu"`) || strings.Contains(string(deploy.WebhookConfiguration), "example.com/npu") {
		t.Fatal("the conditions generated from the edited bundle do not name its new resource")
	}
}

// TestWebhookPolicies: without --bundle the command prints the shipped
// admission policies; with a bundle directory that lists another
// controller, the ticketed-pods policy trusts it and no longer the Job
// controller.
func TestWebhookPolicies(t *testing.T) {
	res := runCLI(t, "webhook", "policies")
	if res.exit != 0 || res.stdout != string(deploy.AdmissionPolicies) {
		t.Fatalf("itogate webhook policies: exit %d, stderr %s; want the shipped policies", res.exit, res.stderr)
	}
	dir := copyPolicies(t, filepath.Join(t.TempDir(), "policies"))
	model := filepath.Join(dir, "ito", "config", "workload", "data.json")
	raw, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	const job = `"system:serviceaccount:kube-system:job-controller"`
	edited := strings.Replace(string(raw), job, `"system:serviceaccount:batch-system:my-job-controller"`, 1)
	if edited == string(raw) {
		t.Fatal("the model no longer names the Job controller")
	}
	if err := os.WriteFile(model, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	res = runCLI(t, "webhook", "policies", "--bundle", dir)
	if res.exit != 0 {
		t.Fatalf("exit %d: %s", res.exit, res.stderr)
	}
	if !strings.Contains(res.stdout, "'system:serviceaccount:batch-system:my-job-controller'") ||
		strings.Contains(res.stdout, "'system:serviceaccount:kube-system:job-controller'") {
		t.Fatal("the policies generated from the edited bundle do not follow its controllers")
	}
}
