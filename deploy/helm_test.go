package deploy

import (
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestHelmLint: `helm lint --strict` passes with the default values and
// with every value set.
func TestHelmLint(t *testing.T) {
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(ownCAValues), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{"defaults": nil, "own CA": {"--values", f}} {
		out, err := tool(t, "", append([]string{"helm", "lint", "--strict", abs(t, chart), "--namespace", "gate"}, args...)...)
		if err != nil || !strings.Contains(string(out), "1 chart(s) linted, 0 chart(s) failed") {
			t.Errorf("helm lint --strict (%s): %v\n%s", name, err, out)
		}
	}
}

// helmOnly are the labels and annotations Helm adds that the kustomize
// install does not have.
var helmOnly = []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version",
	"helm.sh/chart", "checksum/config"}

// normalise drops what only Helm adds and parses itogate.yaml, so that
// two renderings compare by meaning.
func normalise(t *testing.T, o obj) obj {
	t.Helper()
	raw, err := yaml.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var c obj
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	var strip func(v any)
	strip = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range []string{"labels", "annotations"} {
				if m, ok := x[k].(map[string]any); ok {
					for _, h := range helmOnly {
						delete(m, h)
					}
					if len(m) == 0 {
						delete(x, k)
					}
				}
			}
			for _, e := range x {
				strip(e)
			}
		case []any:
			for _, e := range x {
				strip(e)
			}
		}
	}
	strip(c)
	if s, ok := get(c, "data", "itogate.yaml").(string); ok {
		var cfg any
		if err := yaml.Unmarshal([]byte(s), &cfg); err != nil {
			t.Fatal(err)
		}
		c["data"].(map[string]any)["itogate.yaml"] = cfg
	}
	return c
}

// TestHelmMatchesKustomize: with its default values the chart renders the
// same objects as `kustomize build deploy/kubernetes` (the base with the
// cert-manager overlay), field for field but for Helm's own labels — so a
// change to the base that the chart does not carry fails here.
func TestHelmMatchesKustomize(t *testing.T) {
	index := func(objs []obj) map[string]obj {
		m := map[string]obj{}
		for _, o := range objs {
			if o["kind"] == "Namespace" {
				continue // Helm installs into a namespace it does not own (--create-namespace)
			}
			m[o["kind"].(string)+"/"+get(o, "metadata", "name").(string)] = normalise(t, o)
		}
		return m
	}
	k, h := index(kustomize(t, "kubernetes")), index(helm(t, "itogate-system", ""))
	for _, key := range sortedKeys(k) {
		if _, ok := h[key]; !ok {
			t.Errorf("%s: in the kustomize install, not in the chart", key)
		}
	}
	for _, key := range sortedKeys(h) {
		ko, ok := k[key]
		if !ok {
			t.Errorf("%s: in the chart, not in the kustomize install", key)
			continue
		}
		if !reflect.DeepEqual(ko, h[key]) {
			kb, _ := yaml.Marshal(ko)
			hb, _ := yaml.Marshal(h[key])
			t.Errorf("%s differs\nkustomize:\n%s\nhelm:\n%s", key, kb, hb)
		}
	}
}

func sortedKeys(m map[string]obj) []string {
	return slices.Sorted(maps.Keys(m))
}

// TestHelmValues: each value reaches the objects it names.
func TestHelmValues(t *testing.T) {
	in := install{name: "helm (own CA)", objs: helm(t, "gate", ownCAValues), namespace: "gate"}
	d := one(t, in, "Deployment", "itogate")
	if get(d, "spec", "replicas") != 3 {
		t.Errorf("replicas %v, want 3", get(d, "spec", "replicas"))
	}
	c := get(d, "spec", "template", "spec", "containers", 0)
	if img := get(c, "image"); img != "ghcr.io/itocompute/itogate@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
		t.Errorf("image %v, want it pinned by digest", img)
	}
	if ref := get(c, "env", 0, "valueFrom", "secretKeyRef"); get(c, "env", 0, "name") != "PGPASSWORD" ||
		get(ref, "name") != "gate-postgres" || get(ref, "key") != "pw" {
		t.Errorf("env %v: want PGPASSWORD from gate-postgres/pw", get(c, "env"))
	}
	if secretOf(d, "tls") != "gate-tls" || secretOf(d, "keys") != "gate-keys" {
		t.Errorf("volumes %v", get(d, "spec", "template", "spec", "volumes"))
	}
	if len(find(in.objs, "Certificate", "")) != 0 || len(find(in.objs, "Issuer", "")) != 0 {
		t.Error("cert-manager objects without cert-manager")
	}
	vwc := one(t, in, "ValidatingWebhookConfiguration", "itogate")
	h := get(vwc, "webhooks", 0)
	if get(h, "clientConfig", "caBundle") != "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==" || get(vwc, "metadata", "annotations") != nil {
		t.Errorf("clientConfig %v, annotations %v: want the given caBundle only", get(h, "clientConfig"), get(vwc, "metadata", "annotations"))
	}
	var excluded []any
	for _, e := range list(get(h, "namespaceSelector", "matchExpressions")) {
		if get(e, "operator") == "NotIn" {
			excluded = list(get(e, "values"))
		}
	}
	if want := []any{"kube-system", "kube-public", "kube-node-lease", "gate", "monitoring"}; !reflect.DeepEqual(excluded, want) {
		t.Errorf("excluded namespaces %v, want %v (itogate-system replaced by the release's)", excluded, want)
	}
	tol := one(t, in, "ValidatingAdmissionPolicy", "itogate-gpu-tolerations")
	excluded = nil
	for _, e := range list(get(tol, "spec", "matchConstraints", "namespaceSelector", "matchExpressions")) {
		if get(e, "key") == "kubernetes.io/metadata.name" && get(e, "operator") == "NotIn" {
			excluded = list(get(e, "values"))
		}
	}
	if want := []any{"kube-system", "kube-public", "kube-node-lease", "gate", "monitoring"}; !reflect.DeepEqual(excluded, want) {
		t.Errorf("itogate-gpu-tolerations leaves alone %v, want %v", excluded, want)
	}
	keys := ""
	for _, v := range list(get(tol, "spec", "variables")) {
		if get(v, "name") == "taintKeys" {
			keys, _ = get(v, "expression").(string)
		}
	}
	if keys != "['nvidia.com/gpu', 'example.com/accelerator']" {
		t.Errorf("taintKeys %q, want gpuNodeTaint.keys", keys)
	}
	cfg := shippedConfig(t, in)
	if cfg.Ledger.DSN != "postgres://itogate@pgbouncer.db.svc:6432/itogate?sslmode=verify-full" ||
		!reflect.DeepEqual(cfg.Webhook.Namespaces, map[string]string{"ml-research": "acct_ml"}) ||
		cfg.Policy.Bundle.URL != "http://bundles.internal:8080/itogate/bundle.tar.gz" || len(cfg.Policy.Bundle.VerificationKeys) != 1 {
		t.Errorf("config: dsn %s, namespaces %v, bundle %+v", cfg.Ledger.DSN, cfg.Webhook.Namespaces, cfg.Policy.Bundle)
	}
	np := one(t, in, "NetworkPolicy", "itogate")
	want := []any{
		map[string]any{"ports": []any{map[string]any{"port": 53, "protocol": "UDP"}, map[string]any{"port": 53, "protocol": "TCP"}}},
		map[string]any{"ports": []any{map[string]any{"port": 6432, "protocol": "TCP"}}, "to": []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.30.0.0/16"}}}},
		map[string]any{"ports": []any{map[string]any{"port": 8080, "protocol": "TCP"}}, "to": []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.20.0.0/16"}}}},
	}
	if got := get(np, "spec", "egress"); !reflect.DeepEqual(got, want) {
		t.Errorf("egress %v, want %v", got, want)
	}
}

// TestHelmRefusesUnsafeValues: values that would leave the webhook unable
// to verify itogate, or an image reference that is not a digest, fail the
// rendering with a message naming the value.
func TestHelmRefusesUnsafeValues(t *testing.T) {
	for values, want := range map[string]string{
		"tls: {certManager: {enabled: false}}":      "tls.caBundle is required without cert-manager",
		`image: {digest: "latest"}`:                 `image.digest "latest": want sha256:<64 hex digits>`,
		"postgres: {passwordSecret: {name: ''}}":    "postgres.passwordSecret.name",
		`gpuNodeTaint: {keys: ["x' || true || '"]}`: `gpuNodeTaint.keys: "x' || true || '" is not a taint key`,
		"gpuNodeTaint: {keys: []}":                  "gpuNodeTaint.keys: name at least one taint key",
	} {
		if _, err := helmTemplate(t, "gate", values); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %s: %v, want an error with %q", values, err, want)
		}
	}
}
