// The tests render every way of installing itogate — the kustomize base and
// overlays (deploy/kubernetes) and the Helm chart (deploy/helm/itogate) —
// with the pinned helm and kustomize of hack/tools, and keep each rendering
// fail-closed and in step with the policy bundle; `make test-k8s` applies
// them to a real kube-apiserver.
package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/webhook"
	"github.com/itocompute/itogate/policies"
)

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

func list(v any) []any { l, _ := v.([]any); return l }

// ownCAValues install the chart with the operator's own certificate and a
// pinned image in namespace "gate", with every value the chart offers set.
const ownCAValues = `
replicaCount: 3
image: {digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
tls: {certManager: {enabled: false}, secretName: gate-tls, caBundle: "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="}
postgres:
  dsn: postgres://itogate@pgbouncer.db.svc:6432/itogate?sslmode=verify-full
  passwordSecret: {name: gate-postgres, key: pw}
keysSecret: gate-keys
webhook:
  namespaces: {ml-research: acct_ml}
  excludedNamespaces: [monitoring]
gpuNodeTaint: {keys: [nvidia.com/gpu, example.com/accelerator]}
networkPolicy:
  bundleServer: {port: 8080, cidrs: [10.20.0.0/16]}
  postgres: {port: 6432, cidrs: [10.30.0.0/16]}
config:
  policy: {bundle: {url: "http://bundles.internal:8080/itogate/bundle.tar.gz"}}
`

// installs are every shipped way of installing itogate, rendered.
func installs(t *testing.T) []install {
	t.Helper()
	var out []install
	for _, dir := range []string{"kubernetes", "kubernetes/overlays/cert-manager", "kubernetes/overlays/ca-bundle", "kubernetes/examples/team-a"} {
		out = append(out, install{name: "kustomize " + dir, objs: kustomize(t, dir), namespace: "itogate-system"})
	}
	out = append(out,
		install{name: "helm (defaults)", objs: helm(t, "itogate-system", ""), namespace: "itogate-system"},
		install{name: "helm (own CA, pinned image)", objs: helm(t, "gate", ownCAValues), namespace: "gate"})
	return out
}

// find returns the objects of kind (and name, unless "").
func find(objs []obj, kind, name string) []obj {
	var out []obj
	for _, o := range objs {
		if o["kind"] == kind && (name == "" || get(o, "metadata", "name") == name) {
			out = append(out, o)
		}
	}
	return out
}

func one(t *testing.T, in install, kind, name string) obj {
	t.Helper()
	f := find(in.objs, kind, name)
	if len(f) != 1 {
		t.Fatalf("%s: %d %s %q, want one", in.name, len(f), kind, name)
	}
	return f[0]
}

// The Pod's file layout, as TestVolumesAreDirectories asserts it: each
// volume mounted whole, as a directory.
const (
	configMount = "/etc/itogate/config"
	keysMount   = "/etc/itogate/keys"
	tlsMount    = "/etc/itogate/tls"
)

// volumeOf is the Deployment's volume named name (nil when none is).
func volumeOf(d obj, name string) any {
	for _, v := range list(get(d, "spec", "template", "spec", "volumes")) {
		if get(v, "name") == name {
			return v
		}
	}
	return nil
}

// mountOf is where the itogate container mounts the volume named name
// ("" when it does not).
func mountOf(d obj, name string) string {
	for _, m := range list(get(d, "spec", "template", "spec", "containers", 0, "volumeMounts")) {
		if get(m, "name") == name {
			p, _ := get(m, "mountPath").(string)
			return p
		}
	}
	return ""
}

// shippedConfig loads the install's itogate.yaml as its Pod does: the file
// `serve --config` names, inside the directory the config volume is
// mounted at, is the key of that name in the ConfigMap the volume projects
// (whole: no items), read with the strict loader, relative paths resolved
// against the directory --config names (keys and certificates are read at
// start-up, not here).
func shippedConfig(t *testing.T, in install) config.Config {
	t.Helper()
	d := one(t, in, "Deployment", "itogate")
	args := list(get(d, "spec", "template", "spec", "containers", 0, "args"))
	if len(args) != 3 || args[0] != "serve" || args[1] != "--config" {
		t.Fatalf("%s: args %v, want [serve --config <file>]", in.name, args)
	}
	path, _ := args[2].(string)
	vol := volumeOf(d, "config")
	if dir := mountOf(d, "config"); filepath.Dir(path) != dir || dir == "" {
		t.Fatalf("%s: --config %s is not a file of the config volume's directory %q", in.name, path, dir)
	}
	name, _ := get(vol, "configMap", "name").(string)
	if get(vol, "configMap", "items") != nil {
		t.Fatalf("%s: the config volume projects items %v, not the whole ConfigMap", in.name, get(vol, "configMap", "items"))
	}
	raw, ok := get(one(t, in, "ConfigMap", name), "data", filepath.Base(path)).(string)
	if !ok {
		t.Fatalf("%s: ConfigMap %s has no key %s", in.name, name, filepath.Base(path))
	}
	c, err := config.LoadWith(func(p string, limit int64) ([]byte, error) {
		if p != path {
			return nil, fmt.Errorf("read %s, not the --config file", p)
		}
		return []byte(raw), nil
	}, path)
	if err != nil {
		t.Fatalf("%s: itogate.yaml: %v", in.name, err)
	}
	return c
}

// keyFiles are the key files c names (trust, manifest signers, bundle
// verification keys, tickets).
func keyFiles(c config.Config) []string {
	var out []string
	add := func(p string) {
		if p != "" {
			out = append(out, p)
		}
	}
	for _, tt := range []config.TokenTrust{c.Trust.Callers, c.Trust.Depositors, c.Trust.Revokers, c.Trust.Schedulers,
		c.Trust.Entitlement, c.Trust.Confirmation, c.Trust.Evals} {
		add(tt.JWKSFile)
		add(tt.PEMFile)
	}
	for _, k := range c.Trust.ManifestSigners {
		add(k.PEMFile)
	}
	for _, b := range []*config.Bundle{c.Policy.Bundle, c.Policy.Shadow} {
		if b != nil {
			for _, k := range b.VerificationKeys {
				add(k.PEMFile)
			}
		}
	}
	if c.Tickets != nil {
		add(c.Tickets.SigningKey.PEMFile)
		add(c.Tickets.PreviousJWKSFile)
	}
	return out
}

// TestWebhookFailsClosed: every install's configuration refuses when
// itogate cannot answer, never binds on dry runs, answers before the
// apiserver gives up, never covers a system namespace or itogate's own, and
// reaches itogate over verified TLS (a caBundle, or cert-manager's injector
// naming the install's Certificate).
func TestWebhookFailsClosed(t *testing.T) {
	for _, in := range installs(t) {
		t.Run(in.name, func(t *testing.T) {
			vwc := one(t, in, "ValidatingWebhookConfiguration", "itogate")
			hooks := list(vwc["webhooks"])
			if len(hooks) == 0 {
				t.Fatal("no webhooks")
			}
			inject, _ := get(vwc, "metadata", "annotations", "cert-manager.io/inject-ca-from").(string)
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
					get(e, "operator") != "In" || len(list(get(e, "values"))) != 1 || get(e, "values", 0) != mode {
					t.Errorf("%v: selects %v, want itogate.io/enforce In [%s]", get(h, "name"), e, mode)
				}
				if ts, _ := get(h, "timeoutSeconds").(int); ts < 3 || ts > 10 {
					t.Errorf("timeoutSeconds %v: want above itogate's 2 s review bound and well below the apiserver's", ts)
				}
				excluded := map[string]bool{}
				for _, e := range list(get(h, "namespaceSelector", "matchExpressions")) {
					if get(e, "key") == "kubernetes.io/metadata.name" && get(e, "operator") == "NotIn" {
						for _, v := range list(get(e, "values")) {
							excluded[v.(string)] = true
						}
					}
				}
				for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease", in.namespace} {
					if !excluded[ns] {
						t.Errorf("namespace %s is not excluded by name", ns)
					}
				}
				if e, _ := get(h, "matchConditions", 0, "expression").(string); !strings.Contains(e, `startsWith("kube-")`) {
					t.Error("no matchCondition keeps kube-* namespaces out")
				}
				svc := get(h, "clientConfig", "service")
				if get(svc, "namespace") != in.namespace || get(svc, "port") != 443 || get(h, "clientConfig", "url") != nil {
					t.Errorf("clientConfig %v: want the install's Service on 443", get(h, "clientConfig"))
				}
				s := one(t, in, "Service", get(svc, "name").(string))
				if get(s, "spec", "ports", 0, "port") != 443 || get(s, "spec", "ports", 0, "targetPort") != "webhook" {
					t.Errorf("Service %v: want 443 → the webhook port", get(s, "spec", "ports"))
				}
				ca, _ := get(h, "clientConfig", "caBundle").(string)
				switch {
				case ca != "" && inject != "":
					t.Error("both a caBundle and cert-manager's injector")
				case ca == "" && inject == "":
					t.Error("no CA: neither a caBundle nor cert-manager's injector; the apiserver could not verify itogate")
				case inject != "":
					ns, name, _ := strings.Cut(inject, "/")
					if ns != in.namespace || len(find(in.objs, "Certificate", name)) != 1 {
						t.Errorf("inject-ca-from %q names no Certificate of the install", inject)
					}
				}
			}
			if !modes["true"] || !modes["warn"] || len(hooks) != 2 {
				t.Errorf("want one enforcing and one warn webhook, got %d (%v)", len(hooks), modes)
			}
		})
	}
}

// TestWebhookCoversTheBundleKinds: every workload kind of the bundle's
// table is routed to the webhook with the verbs that change what runs (a
// kind in the table but not in the rules would never be checked): CREATE,
// UPDATE unless its spec is immutable (a DRA claim or template), UPDATE of
// its scale subresource when the table says it has one, UPDATE of
// pods/ephemeralcontainers, and UPDATE of pods (the matchConditions send
// one only when it sets a device annotation).
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
	want := []string{"/pods/ephemeralcontainers UPDATE", "/pods UPDATE"}
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
	for _, in := range installs(t) {
		routed := map[string]bool{} // "<group>/<resource>[/<sub>] <OPERATION>"
		for _, h := range list(one(t, in, "ValidatingWebhookConfiguration", "itogate")["webhooks"]) {
			for _, r := range list(get(h, "rules")) {
				for _, g := range list(get(r, "apiGroups")) {
					for _, res := range list(get(r, "resources")) {
						for _, op := range list(get(r, "operations")) {
							routed[g.(string)+"/"+res.(string)+" "+op.(string)] = true
						}
					}
				}
			}
		}
		for _, w := range want {
			if !routed[w] {
				t.Errorf("%s: %s is in the bundle but not routed to the webhook", in.name, w)
			}
		}
	}
}

// TestDeploymentIsHardened: non-root, no privilege escalation, read-only
// root, no service account token, at least two replicas, a
// PodDisruptionBudget, probes over HTTPS.
func TestDeploymentIsHardened(t *testing.T) {
	for _, in := range installs(t) {
		t.Run(in.name, func(t *testing.T) {
			d := one(t, in, "Deployment", "itogate")
			if r, _ := get(d, "spec", "replicas").(int); r < 2 {
				t.Errorf("replicas %v, want 2 or more", get(d, "spec", "replicas"))
			}
			pod := get(d, "spec", "template", "spec")
			if get(pod, "securityContext", "runAsNonRoot") != true || get(pod, "automountServiceAccountToken") != false {
				t.Error("pod: runAsNonRoot and automountServiceAccountToken: false required")
			}
			c := get(pod, "containers", 0)
			if sc := get(c, "securityContext"); get(sc, "allowPrivilegeEscalation") != false || get(sc, "readOnlyRootFilesystem") != true ||
				get(sc, "capabilities", "drop", 0) != "ALL" {
				t.Errorf("container securityContext %v", sc)
			}
			for _, p := range []string{"readinessProbe", "livenessProbe"} {
				if get(c, p, "httpGet", "scheme") != "HTTPS" {
					t.Errorf("%s %v: the API serves HTTPS", p, get(c, p))
				}
			}
			pdb := one(t, in, "PodDisruptionBudget", "itogate")
			if get(pdb, "spec", "minAvailable") != 1 {
				t.Error("PodDisruptionBudget minAvailable 1 required")
			}
		})
	}
}

// secretOf is the Secret name of the Deployment's volume.
func secretOf(d obj, volume string) string {
	s, _ := get(volumeOf(d, volume), "secret", "secretName").(string)
	return s
}

// TestVolumesAreDirectories: no container of any install mounts a volume
// by subPath (or subPathExpr): the kubelet never updates such a mount, so
// an edited ConfigMap or Secret would never reach the Pod and a SIGHUP
// would read the old file. The configuration, the keys and the serving
// pair are read-only directory mounts at configMount, keysMount and
// tlsMount, of the volumes the install defines.
func TestVolumesAreDirectories(t *testing.T) {
	for _, in := range installs(t) {
		t.Run(in.name, func(t *testing.T) {
			d := one(t, in, "Deployment", "itogate")
			pod := get(d, "spec", "template", "spec")
			var containers []any
			for _, k := range []string{"initContainers", "containers", "ephemeralContainers"} {
				containers = append(containers, list(get(pod, k))...)
			}
			for _, c := range containers {
				for _, m := range list(get(c, "volumeMounts")) {
					for _, k := range []string{"subPath", "subPathExpr"} {
						if v := get(m, k); v != nil {
							t.Errorf("container %v mounts volume %v by %s %v: the kubelet never updates it", get(c, "name"), get(m, "name"), k, v)
						}
					}
				}
			}
			for name, want := range map[string]string{"config": configMount, "keys": keysMount, "tls": tlsMount} {
				var m any
				for _, x := range list(get(pod, "containers", 0, "volumeMounts")) {
					if get(x, "name") == name {
						m = x
					}
				}
				if get(m, "mountPath") != want || get(m, "readOnly") != true {
					t.Errorf("volume %s mounted %v, want read-only at %s", name, m, want)
				}
			}
			if get(volumeOf(d, "config"), "configMap", "name") == nil || secretOf(d, "keys") == "" || secretOf(d, "tls") == "" {
				t.Errorf("volumes %v: want config from a ConfigMap, keys and tls from Secrets", get(pod, "volumes"))
			}
		})
	}
}

// TestShippedConfigLoads: each install's itogate.yaml, read as its Pod
// reads it (shippedConfig), passes the strict loader, runs the webhook
// with tickets on PostgreSQL, names every key file inside the keys volume
// and serves both listeners with the pair of the TLS Secret the Deployment
// mounts — the one cert-manager issues for both Services' names, where it
// does.
func TestShippedConfigLoads(t *testing.T) {
	for _, in := range installs(t) {
		t.Run(in.name, func(t *testing.T) {
			c := shippedConfig(t, in)
			if c.Webhook == nil || c.Tickets == nil || c.Ledger.Driver != config.DriverPostgres {
				t.Fatalf("webhook, tickets and a PostgreSQL ledger expected: %+v", c)
			}
			// The paths as the Pod resolves them: a relative one would
			// point into the config volume, where no key or pair is.
			cert, key := tlsMount+"/tls.crt", tlsMount+"/tls.key"
			if c.TLS == nil || c.TLS.CertFile != cert || c.TLS.KeyFile != key || c.Webhook.CertFile != cert || c.Webhook.KeyFile != key {
				t.Errorf("tls %+v, webhook %s %s: both listeners serve the mounted pair %s, %s", c.TLS, c.Webhook.CertFile, c.Webhook.KeyFile, cert, key)
			}
			files := keyFiles(c)
			if len(files) == 0 {
				t.Error("no key files")
			}
			for _, f := range files {
				if filepath.Dir(f) != keysMount {
					t.Errorf("key file %s: not a file of the keys volume %s", f, keysMount)
				}
			}
			if _, port, _ := net.SplitHostPort(c.Listen); port != "8443" {
				t.Errorf("listen %s, want the API port 8443", c.Listen)
			}
			if _, port, _ := net.SplitHostPort(c.Webhook.Listen); port != "9443" {
				t.Errorf("webhook.listen %s, want the webhook port 9443", c.Webhook.Listen)
			}
			d := one(t, in, "Deployment", "itogate")
			secret := secretOf(d, "tls")
			if certs := find(in.objs, "Certificate", "itogate-tls"); len(certs) == 1 {
				if get(certs[0], "spec", "secretName") != secret {
					t.Errorf("the Certificate issues %v, the Deployment mounts %s", get(certs[0], "spec", "secretName"), secret)
				}
				names := map[string]bool{}
				for _, n := range list(get(certs[0], "spec", "dnsNames")) {
					names[n.(string)] = true
				}
				for _, svc := range []string{"itogate-webhook", "itogate"} {
					if !names[svc+"."+in.namespace+".svc"] {
						t.Errorf("the certificate does not name %s.%s.svc", svc, in.namespace)
					}
				}
			}
		})
	}
}

// portOf is a URL's port (its scheme's default when none is given).
func portOf(t *testing.T, raw string) int {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if p := u.Port(); p != "" {
		var n int
		fmt.Sscan(p, &n)
		return n
	}
	return map[string]int{"https": 443, "http": 80, "postgres": 5432, "postgresql": 5432}[u.Scheme]
}

// TestNetworkPolicyLetsItogateWork: the webhook port is open to the
// apiserver, and egress reaches DNS, the ledger's port and the bundle
// server's port (policy.bundle.url): a NetworkPolicy that blocks the bundle
// server leaves every replica unready.
func TestNetworkPolicyLetsItogateWork(t *testing.T) {
	for _, in := range installs(t) {
		t.Run(in.name, func(t *testing.T) {
			c := shippedConfig(t, in)
			np := one(t, in, "NetworkPolicy", "itogate")
			open := func(rules any) map[int]bool {
				ports := map[int]bool{}
				for _, r := range list(rules) {
					for _, p := range list(get(r, "ports")) {
						if n, ok := get(p, "port").(int); ok {
							ports[n] = true
						}
					}
				}
				return ports
			}
			if !open(get(np, "spec", "ingress"))[9443] {
				t.Error("ingress: the webhook port 9443 is closed")
			}
			egress := open(get(np, "spec", "egress"))
			if c.Policy.Bundle == nil || c.Policy.Bundle.URL == "" {
				t.Fatal("no bundle URL")
			}
			for what, port := range map[string]int{"DNS": 53, "the ledger": portOf(t, c.Ledger.DSN),
				"the bundle server": portOf(t, c.Policy.Bundle.URL)} {
				if !egress[port] {
					t.Errorf("egress to %s (port %d) is blocked: %v", what, port, get(np, "spec", "egress"))
				}
			}
		})
	}
}

// TestBaseBuildsAlone: `kubectl kustomize deploy/kubernetes/base` builds
// (the overlays add the certificate), with every object of the install.
func TestBaseBuildsAlone(t *testing.T) {
	var kinds []string
	for _, o := range kustomize(t, "kubernetes/base") {
		kinds = append(kinds, o["kind"].(string)+"/"+get(o, "metadata", "name").(string))
	}
	slices.Sort(kinds)
	want := []string{"ConfigMap/itogate-config", "Deployment/itogate", "Namespace/itogate-system", "NetworkPolicy/itogate",
		"PodDisruptionBudget/itogate", "Service/itogate", "Service/itogate-webhook", "ServiceAccount/itogate",
		"ValidatingAdmissionPolicy/itogate-gpu-tolerations",
		"ValidatingAdmissionPolicy/itogate-namespace-labels", "ValidatingAdmissionPolicy/itogate-pod-deletion",
		"ValidatingAdmissionPolicy/itogate-pod-device-annotations",
		"ValidatingAdmissionPolicy/itogate-ticketed-pods", "ValidatingAdmissionPolicy/itogate-workload-delete",
		"ValidatingAdmissionPolicyBinding/itogate-gpu-tolerations", "ValidatingAdmissionPolicyBinding/itogate-namespace-labels",
		"ValidatingAdmissionPolicyBinding/itogate-pod-deletion", "ValidatingAdmissionPolicyBinding/itogate-pod-device-annotations",
		"ValidatingAdmissionPolicyBinding/itogate-ticketed-pods",
		"ValidatingAdmissionPolicyBinding/itogate-workload-delete",
		"ValidatingWebhookConfiguration/itogate"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("base objects %v, want %v", kinds, want)
	}
}

// TestExampleCreatesTheTenantNamespace: the example installation puts its
// tenant namespace under control, binds it to an account, and gives its
// tenants (the group team-a) the stock edit role there and nowhere else.
func TestExampleCreatesTheTenantNamespace(t *testing.T) {
	in := install{name: "examples/team-a", objs: kustomize(t, "kubernetes/examples/team-a"), namespace: "itogate-system"}
	ns := one(t, in, "Namespace", "team-a")
	if get(ns, "metadata", "labels", "itogate.io/enforce") != "true" {
		t.Errorf("team-a labels %v: not under control", get(ns, "metadata", "labels"))
	}
	rb := one(t, in, "RoleBinding", "team-a-edit")
	if get(rb, "metadata", "namespace") != "team-a" || get(rb, "roleRef", "kind") != "ClusterRole" ||
		get(rb, "roleRef", "name") != "edit" || get(rb, "subjects", 0, "kind") != "Group" ||
		get(rb, "subjects", 0, "name") != "team-a" || len(list(get(rb, "subjects"))) != 1 {
		t.Errorf("the tenant RoleBinding %v: want the group team-a bound to edit in team-a", rb)
	}
	if n := len(find(in.objs, "ClusterRoleBinding", "")) + len(find(in.objs, "ClusterRole", "")); n != 0 {
		t.Errorf("%d cluster-wide RBAC objects in the example, want none", n)
	}
	if acct := shippedConfig(t, in).Webhook.Namespaces["team-a"]; acct == "" {
		t.Error("team-a is bound to no account")
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

// TestAdmissionPoliciesFailClosed: the shipped ValidatingAdmissionPolicies
// fail closed, each bound with Deny, each refusal a 403 led by its stable
// code; the delete guard covers every workload kind of the bundle that
// has children (not a Pod, not a DRA claim or template), and the namespace
// guard names the labels docs/kubernetes.md lists. `make test-k8s` runs
// them on a real apiserver.
func TestAdmissionPoliciesFailClosed(t *testing.T) {
	f, err := os.Open(filepath.Join("kubernetes", "base", "admissionpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var d []map[string]any
	for dec := yaml.NewDecoder(f); ; {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		d = append(d, doc)
	}
	codes := webhook.AdmissionPolicyCodes
	vaps, bound := map[string]map[string]any{}, map[string]bool{}
	for _, doc := range d {
		name, _ := get(doc, "metadata", "name").(string)
		switch doc["kind"] {
		case "ValidatingAdmissionPolicy":
			vaps[name] = doc
		case "ValidatingAdmissionPolicyBinding":
			acts, _ := get(doc, "spec", "validationActions").([]any)
			if len(acts) != 1 || acts[0] != "Deny" || get(doc, "spec", "policyName") != name {
				t.Errorf("binding %s: %v", name, get(doc, "spec"))
			}
			bound[name] = true
		default:
			t.Errorf("unexpected %v", doc["kind"])
		}
	}
	for name, code := range codes {
		p := vaps[name]
		if p == nil || !bound[name] {
			t.Errorf("policy %s: missing or unbound", name)
			continue
		}
		if get(p, "spec", "failurePolicy") != "Fail" {
			t.Errorf("%s: failurePolicy %v", name, get(p, "spec", "failurePolicy"))
		}
		vs, _ := get(p, "spec", "validations").([]any)
		for _, v := range vs {
			msg, _ := get(v, "messageExpression").(string)
			if get(v, "reason") != "Forbidden" || !strings.HasPrefix(msg, "'"+string(code)+": ") {
				t.Errorf("%s: validation %v: want reason Forbidden and a message led by %s", name, v, code)
			}
		}
	}
	if len(vaps) != len(codes) {
		t.Errorf("policies %d, want %d", len(vaps), len(codes))
	}

	raw, err := fs.ReadFile(policies.Bundle(), "ito/tables/workloads/data.json")
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Kinds map[string]struct {
			Resource  string `json:"resource"`
			Leaf      bool   `json:"leaf"`
			ClaimSets []any  `json:"claim_sets"`
		} `json:"kinds"`
	}
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	guarded := map[string]bool{}
	for _, r := range get(vaps["itogate-workload-delete"], "spec", "matchConstraints", "resourceRules").([]any) {
		ops := fmt.Sprint(get(r, "operations"))
		for _, g := range get(r, "apiGroups").([]any) {
			for _, res := range get(r, "resources").([]any) {
				if ops == "[CREATE UPDATE DELETE]" {
					guarded[g.(string)+"/"+res.(string)] = true
				}
			}
		}
	}
	for key, k := range table.Kinds {
		group, _, _ := strings.Cut(key, "/")
		if !k.Leaf && len(k.ClaimSets) == 0 && !guarded[group+"/"+k.Resource] {
			t.Errorf("%s/%s has children but its orphaning delete is not guarded", group, k.Resource)
		}
	}
	labels := fmt.Sprint(get(vaps["itogate-namespace-labels"], "spec", "variables"))
	for _, l := range []string{"'itogate.io/'", "'resource.kubernetes.io/admin-access'", "'pod-security.kubernetes.io/'"} {
		if !strings.Contains(labels, l) {
			t.Errorf("the namespace guard does not name %s", l)
		}
	}
}
