// The tests keep the deploy files fail-closed and in step with the policy
// bundle. `make test-k8s` applies the same ValidatingWebhookConfiguration to
// a real kube-apiserver.
package deploy

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/webhook"
	"github.com/itocompute/itogate/policies"
)

// docs reads every YAML document of a file as generic values.
func docs(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	var out []map[string]any
	for {
		var d map[string]any
		if err := dec.Decode(&d); err != nil {
			if err.Error() == "EOF" {
				return out
			}
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, d)
	}
}

func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// TestWebhookFailsClosed: the shipped configuration refuses when itogate
// cannot answer, never binds on dry runs, answers before the apiserver
// gives up, and never covers a system namespace.
func TestWebhookFailsClosed(t *testing.T) {
	d := docs(t, filepath.Join("kubernetes", "base", "validatingwebhookconfiguration.yaml"))
	if len(d) != 1 || d[0]["kind"] != "ValidatingWebhookConfiguration" {
		t.Fatalf("want one ValidatingWebhookConfiguration, got %d documents", len(d))
	}
	hooks, _ := d[0]["webhooks"].([]any)
	if len(hooks) == 0 {
		t.Fatal("no webhooks")
	}
	modes := map[string]bool{}
	for _, h := range hooks {
		// The enforcing webhook fails closed and selects enforce=true; the
		// warn webhook (/validate-warn, binds nothing, never refuses)
		// selects enforce=warn only, so no namespace is in both.
		mode, policy, effects := "true", "Fail", "NoneOnDryRun"
		if get(h, "clientConfig", "service", "path") == "/validate-warn" {
			mode, policy, effects = "warn", "Ignore", "None"
		}
		modes[mode] = true
		if get(h, "failurePolicy") != policy || get(h, "sideEffects") != effects {
			t.Errorf("%v: failurePolicy %v, sideEffects %v", get(h, "name"), get(h, "failurePolicy"), get(h, "sideEffects"))
		}
		if e := get(h, "namespaceSelector", "matchExpressions", 0); get(e, "key") != "itogate.io/enforce" ||
			get(e, "operator") != "In" || len(get(e, "values").([]any)) != 1 || get(e, "values", 0) != mode {
			t.Errorf("%v: selects %v, want itogate.io/enforce In [%s]", get(h, "name"), e, mode)
		}
		if ts, _ := get(h, "timeoutSeconds").(int); ts < 3 || ts > 10 {
			t.Errorf("timeoutSeconds %v: want above itogate's 2 s review bound and well below the apiserver's", ts)
		}
		excluded := map[string]bool{}
		for _, e := range get(h, "namespaceSelector", "matchExpressions").([]any) {
			if get(e, "key") == "kubernetes.io/metadata.name" && get(e, "operator") == "NotIn" {
				for _, v := range get(e, "values").([]any) {
					excluded[v.(string)] = true
				}
			}
		}
		for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease", "itogate-system"} {
			if !excluded[ns] {
				t.Errorf("namespace %s is not excluded by name", ns)
			}
		}
		if !strings.Contains(get(h, "matchConditions", 0, "expression").(string), `startsWith("kube-")`) {
			t.Error("no matchCondition keeps kube-* namespaces out")
		}
	}
	if !modes["true"] || !modes["warn"] || len(hooks) != 2 {
		t.Errorf("want one enforcing and one warn webhook, got %d (%v)", len(hooks), modes)
	}
}

// TestWebhookCoversTheBundleKinds: every workload kind of the bundle's
// table is routed to the webhook with the verbs that change what runs (a
// kind in the table but not in the rules would never be checked): CREATE,
// UPDATE unless its spec is immutable (a DRA claim or template), UPDATE of
// its scale subresource when the table says it has one, and UPDATE of
// pods/ephemeralcontainers.
func TestWebhookCoversTheBundleKinds(t *testing.T) {
	raw, err := fs.ReadFile(policies.Bundle(), "ito/tables/workloads/data.json")
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Kinds map[string]struct {
			Resource  string `json:"resource"`
			Scale     bool   `json:"scale"`
			ClaimSets []any  `json:"claim_sets"`
		} `json:"kinds"`
	}
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	routed := map[string]bool{} // "<group>/<resource>[/<sub>] <OPERATION>"
	d := docs(t, filepath.Join("kubernetes", "base", "validatingwebhookconfiguration.yaml"))
	for _, h := range d[0]["webhooks"].([]any) {
		for _, r := range get(h, "rules").([]any) {
			for _, g := range get(r, "apiGroups").([]any) {
				for _, res := range get(r, "resources").([]any) {
					for _, op := range get(r, "operations").([]any) {
						routed[g.(string)+"/"+res.(string)+" "+op.(string)] = true
					}
				}
			}
		}
	}
	want := []string{"/pods/ephemeralcontainers UPDATE"}
	for key, k := range table.Kinds {
		group, _, _ := strings.Cut(key, "/")
		if k.Resource == "" {
			t.Errorf("kind %s: the table names no resource", key)
			continue
		}
		want = append(want, group+"/"+k.Resource+" CREATE")
		if len(k.ClaimSets) == 0 && k.Resource != "pods" {
			want = append(want, group+"/"+k.Resource+" UPDATE")
		}
		if k.Scale {
			want = append(want, group+"/"+k.Resource+"/scale UPDATE")
		}
	}
	for _, w := range want {
		if !routed[w] {
			t.Errorf("%s is in the bundle but not routed to the webhook", w)
		}
	}
}

// TestDeploymentIsHardened: non-root, no privilege escalation, read-only
// root, no service account token, two replicas, a PodDisruptionBudget.
func TestDeploymentIsHardened(t *testing.T) {
	d := docs(t, filepath.Join("kubernetes", "base", "deployment.yaml"))[0]
	if get(d, "spec", "replicas") != 2 {
		t.Error("replicas != 2")
	}
	pod := get(d, "spec", "template", "spec")
	if get(pod, "securityContext", "runAsNonRoot") != true || get(pod, "automountServiceAccountToken") != false {
		t.Error("pod: runAsNonRoot and automountServiceAccountToken: false required")
	}
	c := get(pod, "containers", 0, "securityContext")
	if get(c, "allowPrivilegeEscalation") != false || get(c, "readOnlyRootFilesystem") != true ||
		get(c, "capabilities", "drop", 0) != "ALL" {
		t.Errorf("container securityContext %v", c)
	}
	pdb := docs(t, filepath.Join("kubernetes", "base", "poddisruptionbudget.yaml"))[0]
	if pdb["kind"] != "PodDisruptionBudget" || get(pdb, "spec", "minAvailable") != 1 {
		t.Error("PodDisruptionBudget minAvailable 1 required")
	}
}

// TestShippedConfigLoads: the ConfigMap's itogate.yaml passes the strict
// loader (keys and certificates are read at start-up, not here).
func TestShippedConfigLoads(t *testing.T) {
	cm := docs(t, filepath.Join("kubernetes", "base", "configmap.yaml"))[0]
	path := filepath.Join(t.TempDir(), "itogate.yaml")
	if err := os.WriteFile(path, []byte(get(cm, "data", "itogate.yaml").(string)), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Webhook == nil || c.Tickets == nil || c.Ledger.Driver != config.DriverPostgres {
		t.Fatalf("webhook, tickets and a PostgreSQL ledger expected: %+v", c)
	}
}

// TestWebhookConfigurationIsGenerated: the shipped configuration is what
// `itogate webhook config` prints for the embedded bundle, so its
// matchConditions follow the bundle's resource model.
func TestWebhookConfigurationIsGenerated(t *testing.T) {
	want, err := webhook.Configuration(WebhookConfiguration, policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(WebhookConfiguration) {
		t.Fatal("kubernetes/base/validatingwebhookconfiguration.yaml is not current: " +
			"go run ./cmd/itogate webhook config > deploy/kubernetes/base/validatingwebhookconfiguration.yaml")
	}
}
