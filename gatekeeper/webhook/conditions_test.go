package webhook_test

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/webhook"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

// matcher is the apiserver's own evaluation of a webhook's matchConditions
// (k8s.io/apiserver's compiler, environment and matcher, failurePolicy
// Fail).
type matcher struct{ m matchconditions.Matcher }

func newMatcher(t *testing.T, conds []admissionregistrationv1.MatchCondition) matcher {
	t.Helper()
	compiler := plugincel.NewConditionCompiler(environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()))
	exprs := make([]plugincel.ExpressionAccessor, len(conds))
	for i, c := range conds {
		exprs[i] = &matchconditions.MatchCondition{Name: c.Name, Expression: c.Expression}
	}
	filter := compiler.CompileCondition(exprs, plugincel.OptionalVariableDeclarations{HasAuthorizer: true}, environment.NewExpressions)
	if errs := filter.CompilationErrors(); len(errs) > 0 {
		t.Fatalf("the conditions do not compile: %v", errs)
	}
	fail := admissionregistrationv1.Fail
	return matcher{matchconditions.NewMatcher(filter, &fail, "webhook", "validating", "workloads.itogate.io")}
}

// rq is one admission request, for the matcher and for the handler.
type rq struct {
	group, version, kind, resource, sub, op, ns string
	obj, old                                    map[string]any
}

func (r rq) name() string {
	if md, ok := r.obj["metadata"].(map[string]any); ok {
		if n, ok := md["name"].(string); ok {
			return n
		}
	}
	return "x"
}

// sent: the apiserver calls the webhook for r. A condition that fails to
// evaluate fails the test (under failurePolicy: Fail it refuses the object).
func (m matcher) sent(t *testing.T, r rq) bool {
	t.Helper()
	gvk := schema.GroupVersionKind{Group: r.group, Version: r.version, Kind: r.kind}
	var obj, old runtime.Object
	if r.obj != nil {
		u := &unstructured.Unstructured{Object: r.obj}
		u.SetGroupVersionKind(gvk)
		obj = u
	}
	if r.old != nil {
		u := &unstructured.Unstructured{Object: r.old}
		u.SetGroupVersionKind(gvk)
		old = u
	}
	attr := admission.NewAttributesRecord(obj, old, gvk, r.ns, r.name(),
		schema.GroupVersionResource{Group: r.resourceGroup(), Version: r.version, Resource: r.resource}, r.sub,
		admission.Operation(r.op), nil, false, nil)
	va, err := admission.NewVersionedAttributes(attr, gvk, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := m.m.Match(t.Context(), va, nil, nil)
	if res.Error != nil {
		t.Fatalf("%s: the conditions fail to evaluate: %v", r.name(), res.Error)
	}
	return res.Matches
}

// resourceGroup: a Scale's review names its parent resource's group.
func (r rq) resourceGroup() string {
	if r.sub == "scale" {
		return "kubeflow.org"
	}
	return r.group
}

// decide is the handler's answer to r.
func decide(t *testing.T, h *webhook.Handler, r rq) *admissionv1.AdmissionResponse {
	t.Helper()
	req := &admissionv1.AdmissionRequest{UID: "req-" + "x", Operation: admissionv1.Operation(r.op), Namespace: r.ns, Name: r.name(),
		Kind:        metaGVK(r.group, r.version, r.kind),
		Resource:    metaGVR(r.resourceGroup(), r.version, r.resource),
		SubResource: r.sub}
	req.Object.Raw, _ = json.Marshal(r.obj)
	if r.old != nil {
		req.OldObject.Raw, _ = json.Marshal(r.old)
	}
	return h.Review(t.Context(), req)
}

// withTemplate is an object of the table's kind key whose every pod set
// holds a copy of spec with a template metadata of meta (a Pod's are its
// own); each collection is a map keyed "Worker" for *ReplicaSpecs, a list
// otherwise.
func withTemplate(kindKey string, k tableKind, name string, spec, meta map[string]any) map[string]any {
	obj := map[string]any{"metadata": map[string]any{"name": name, "namespace": "team-a", "uid": "uid-" + name}}
	for _, set := range k.PodSets {
		elem := map[string]any{}
		base := obj
		if len(set.Each) > 0 {
			base = elem
		}
		put(base, set.Path, deepCopy(spec))
		metaPath := append(slices.Clone(set.Path[:len(set.Path)-1]), "metadata")
		if len(metaPath) == 1 {
			for k, v := range deepCopy(meta) {
				obj["metadata"].(map[string]any)[k] = v
			}
		} else {
			put(base, metaPath, deepCopy(meta))
		}
		if len(set.Each) > 0 {
			var coll any = []any{elem}
			if strings.HasSuffix(set.Each[len(set.Each)-1], "ReplicaSpecs") {
				coll = map[string]any{"Worker": elem}
			}
			if existing := get(obj, set.Each); existing != nil {
				continue // two pod sets over one collection: the first element serves both
			}
			put(obj, set.Each, coll)
		}
	}
	return obj
}

func put(m map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = v
}

func get(m map[string]any, path []string) any {
	var v any = m
	for _, p := range path {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

func deepCopy(m map[string]any) map[string]any {
	raw, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}

type tableKind struct {
	Resource string `json:"resource"`
	PodSets  []struct {
		Each []string `json:"each"`
		Path []string `json:"path"`
	} `json:"pod_sets"`
}

func readKinds(t *testing.T, bundle fs.FS) map[string]tableKind {
	t.Helper()
	raw, err := fs.ReadFile(bundle, webhook.KindsTablePath)
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Kinds map[string]tableKind `json:"kinds"`
	}
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	return table.Kinds
}

// feature is one way item 1 counts GPUs (or GPU access): it changes a pod
// spec or its template's metadata.
type feature struct {
	name  string
	apply func(spec, meta map[string]any)
}

// addContainer adds c to the pod spec's list (containers, initContainers, a
// native sidecar, ephemeralContainers: round-robin by n).
func addContainer(spec map[string]any, n int, c map[string]any) {
	c["name"], c["image"] = fmt.Sprintf("c%d", n), "img:1"
	list := []string{"containers", "initContainers", "initContainers", "ephemeralContainers"}[n%4]
	if n%4 == 2 {
		c["restartPolicy"] = "Always"
	}
	l, _ := spec[list].([]any)
	spec[list] = append(l, c)
}

// counted are the features of the shipped model, each placed in a
// container list chosen by its index.
func counted() []feature {
	var fs []feature
	add := func(name string, f func(spec, meta map[string]any, n int)) {
		n := len(fs)
		fs = append(fs, feature{name, func(spec, meta map[string]any) { f(spec, meta, n) }})
	}
	for _, r := range []string{"nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared", "amd.com/gpu",
		"gpu.intel.com/i915", "gpu.intel.com/xe", "habana.ai/gaudi",
		"deviceclass.resource.kubernetes.io/gpu.nvidia.com", "deviceclass.resource.kubernetes.io/fast-gpus"} {
		for _, field := range []string{"limits", "requests"} {
			add(field+" "+r, func(spec, _ map[string]any, n int) {
				addContainer(spec, n, map[string]any{"resources": map[string]any{field: map[string]any{r: "8"}}})
			})
		}
		add("invalid quantity "+r, func(spec, _ map[string]any, n int) {
			addContainer(spec, n, map[string]any{"resources": map[string]any{"limits": map[string]any{r: "500m"}}})
		})
	}
	for _, e := range []string{"NVIDIA_VISIBLE_DEVICES", "AMD_VISIBLE_DEVICES", "HABANA_VISIBLE_DEVICES"} {
		add("env "+e, func(spec, _ map[string]any, n int) {
			addContainer(spec, n, map[string]any{"env": []any{map[string]any{"name": e, "value": "all"}}})
		})
		add("env from a reference "+e, func(spec, _ map[string]any, n int) {
			addContainer(spec, n, map[string]any{"env": []any{map[string]any{"name": e,
				"valueFrom": map[string]any{"configMapKeyRef": map[string]any{"name": "cm", "key": "k"}}}}})
		})
	}
	add("privileged", func(spec, _ map[string]any, n int) {
		addContainer(spec, n, map[string]any{"securityContext": map[string]any{"privileged": true}})
	})
	for _, p := range []string{"/var/run/nvidia-container-devices", "/run/nvidia-container-devices/gpu0",
		"/var//run/./nvidia-container-devices/", "/var/run/nvidia-container-devices/all",
		"/var/run/nvidia-container-devicesall", "/var/run/x/../nvidia-container-devices/all", "var/run/nvidia-container-devices/0"} {
		add("device mount "+p, func(spec, _ map[string]any, n int) {
			addContainer(spec, n, map[string]any{"volumeMounts": []any{map[string]any{"name": "v", "mountPath": p}}})
		})
	}
	for _, p := range []string{"/dev/nvidia0", "/dev/nvidiactl", "/dev/dri", "/dev/kfd", "/dev/accel/accel0", "/dev/vfio", "/dev", "/", "//dev/./dri/"} {
		add("hostPath "+p, func(spec, _ map[string]any, n int) {
			addContainer(spec, n, map[string]any{})
			spec["volumes"] = []any{map[string]any{"name": "h", "hostPath": map[string]any{"path": p}}}
		})
	}
	// Only the annotation: a prefix's key, a prefix without its slash, an
	// exact key.
	for _, k := range []string{"cdi.k8s.io/gpu", "nvidia.cdi.k8s.io/container.c0", "nvidia.cdi.k8s.io", "devices.noderesource.dev",
		"cdi-devices.nri.io/pod", "io.kubernetes.cri-o.Devices"} {
		add("annotation "+k, func(spec, meta map[string]any, n int) {
			addContainer(spec, n, map[string]any{})
			meta["annotations"] = map[string]any{k: "nvidia.com/gpu=all"}
		})
	}
	add("DRA claim template", func(spec, _ map[string]any, n int) {
		addContainer(spec, n, map[string]any{})
		spec["resourceClaims"] = []any{map[string]any{"name": "g", "resourceClaimTemplateName": "eight-gpus"}}
	})
	add("DRA standalone claim", func(spec, _ map[string]any, n int) {
		addContainer(spec, n, map[string]any{"resources": map[string]any{"limits": map[string]any{"cpu": "1"}}})
		spec["resourceClaims"] = []any{map[string]any{"name": "g", "resourceClaimName": "shared"}}
	})
	return fs
}

// cpuOnly is a pod spec and template metadata with nothing item 1 counts:
// the policy allows it without a ticket and the webhook is not called.
func cpuOnly() (map[string]any, map[string]any) {
	no := false
	return map[string]any{
			"containers": []any{map[string]any{"name": "app", "image": "app:1",
				"resources":       map[string]any{"limits": map[string]any{"cpu": "2", "memory": "4Gi", "example.com/nic": "1"}},
				"env":             []any{map[string]any{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}, map[string]any{"name": "FOO", "value": "bar"}},
				"securityContext": map[string]any{"privileged": no, "runAsNonRoot": true},
				"volumeMounts":    []any{map[string]any{"name": "data", "mountPath": "/data"}}}},
			"initContainers": []any{map[string]any{"name": "init", "image": "init:1",
				"resources": map[string]any{"requests": map[string]any{"cpu": "100m"}}}},
			"volumes": []any{map[string]any{"name": "data", "emptyDir": map[string]any{}},
				map[string]any{"name": "cfg", "configMap": map[string]any{"name": "cfg"}}},
		},
		map[string]any{"annotations": map[string]any{"example.com/team": "a"}, "labels": map[string]any{"app": "x"}}
}

// gvkOf is the review's kind of a table key "<group>/<Kind>".
func gvkOf(key string) (group, version, kind string) {
	group, kind, _ = strings.Cut(key, "/")
	version = "v1"
	return group, version, kind
}

// TestMatchConditions holds the generated matchConditions to the policy
// they stand in front of, with the apiserver's own CEL evaluation: for
// every kind of the bundle, every pod set and every path item 1 counts
// (GPU resource names and prefixes by request and limit, DRA extended
// resources of listed and unlisted classes, invalid quantities, device
// variables by value and reference, privileged, device mounts, host device
// paths, CDI annotations, claim templates and standalone claims, in each
// container list), the policy refuses the object without a ticket and the
// webhook is called; for an object with none of them the policy allows and
// the webhook is not called. Scale, ephemeral containers and system
// namespaces likewise.
func TestMatchConditions(t *testing.T) {
	f := newFixture(t)
	conds, err := webhook.MatchConditions(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	m := newMatcher(t, conds)
	kinds := readKinds(t, policies.Bundle())
	cases := 0
	for _, key := range slices.Sorted(maps.Keys(kinds)) {
		k := kinds[key]
		if len(k.PodSets) == 0 {
			continue
		}
		group, version, kind := gvkOf(key)
		for _, ft := range counted() {
			spec, meta := map[string]any{}, map[string]any{}
			ft.apply(spec, meta)
			r := rq{group: group, version: version, kind: kind, resource: k.Resource, op: "CREATE", ns: "team-a",
				obj: withTemplate(key, k, "w", spec, meta)}
			if resp := decide(t, f.h, r); resp.Allowed {
				t.Errorf("%s, %s: the policy allows it; not a counted path", key, ft.name)
			}
			if !m.sent(t, r) {
				t.Errorf("%s, %s: the policy refuses it, the webhook is not called", key, ft.name)
			}
			cases++
		}
		spec, meta := cpuOnly()
		r := rq{group: group, version: version, kind: kind, resource: k.Resource, op: "CREATE", ns: "team-a",
			obj: withTemplate(key, k, "cpu", spec, meta)}
		if resp := decide(t, f.h, r); !resp.Allowed {
			t.Errorf("%s without GPUs: denied %v", key, resp.Result.Message)
		}
		if m.sent(t, r) {
			t.Errorf("%s without GPUs: sent to the webhook", key)
		}
		// A GPU object in a kube-* namespace is never sent.
		spec, meta = map[string]any{}, map[string]any{}
		counted()[0].apply(spec, meta)
		if m.sent(t, rq{group: group, version: version, kind: kind, resource: k.Resource, op: "CREATE", ns: "kube-x",
			obj: withTemplate(key, k, "sys", spec, meta)}) {
			t.Errorf("%s in kube-x: sent", key)
		}
	}
	if cases < 12*40 {
		t.Fatalf("only %d counted cases", cases)
	}

	// pods/ephemeralcontainers: a debug container with a device variable
	// is sent and refused; a plain one is neither.
	spec, meta := cpuOnly()
	debuggee := withTemplate("/Pod", kinds["/Pod"], "debuggee", spec, meta)
	plain := deepCopy(debuggee)
	plain["spec"].(map[string]any)["ephemeralContainers"] = []any{map[string]any{"name": "debug", "image": "busybox:1"}}
	gpu := deepCopy(plain)
	gpu["spec"].(map[string]any)["ephemeralContainers"].([]any)[0].(map[string]any)["env"] = []any{
		map[string]any{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}}
	for _, c := range []struct {
		obj  map[string]any
		send bool
	}{{plain, false}, {gpu, true}} {
		r := rq{kind: "Pod", version: "v1", resource: "pods", sub: "ephemeralcontainers", op: "UPDATE", ns: "team-a", obj: c.obj, old: debuggee}
		if got := m.sent(t, r); got != c.send {
			t.Errorf("ephemeral container (send %v): sent %v", c.send, got)
		}
		if resp := decide(t, f.h, r); resp.Allowed != !c.send {
			t.Errorf("ephemeral container (send %v): allowed %v", c.send, resp.Allowed)
		}
	}

	// <kind>/scale: up, to a negative count or from an absurd one is sent
	// and refused; down or level is neither.
	scale := func(n int64) map[string]any {
		return map[string]any{"metadata": map[string]any{"name": "pj", "namespace": "team-a"}, "spec": map[string]any{"replicas": n}}
	}
	for _, c := range []struct {
		from, to int64
		send     bool
	}{{2, 4, true}, {4, 2, false}, {2, 2, false}, {2, -1, true}, {200_000, 5, true}, {4, 0, false}} {
		r := rq{group: "autoscaling", version: "v1", kind: "Scale", resource: "pytorchjobs", sub: "scale", op: "UPDATE", ns: "team-a",
			obj: scale(c.to), old: scale(c.from)}
		if got := m.sent(t, r); got != c.send {
			t.Errorf("scale %d→%d: sent %v", c.from, c.to, got)
		}
		if resp := decide(t, f.h, r); resp.Allowed != !c.send {
			t.Errorf("scale %d→%d: allowed %v", c.from, c.to, resp.Allowed)
		}
	}

	// DRA claims and templates are always sent.
	for _, res := range []string{"resourceclaims", "resourceclaimtemplates"} {
		if !m.sent(t, rq{group: "resource.k8s.io", version: "v1", kind: "ResourceClaim", resource: res, op: "CREATE", ns: "team-a",
			obj: map[string]any{"metadata": map[string]any{"name": "c"}, "spec": map[string]any{}}}) {
			t.Errorf("%s: not sent", res)
		}
	}
}

// TestMatchConditionsFollowTheModel: names an operator adds to the
// bundle's resource model (a GPU resource name and prefix, a device
// variable, a device mount path, a device annotation prefix, with and
// without its slash, and key) are refused
// by the policy of that bundle and sent by the conditions generated from
// it; the shipped conditions, generated from the shipped model, do not
// send them.
func TestMatchConditionsFollowTheModel(t *testing.T) {
	edited := bundletest.Edited(t, policies.Bundle(), webhook.ResourceModelPath, `"names": [
      "habana.ai/gaudi"
    ],
    "prefixes": [`, `"names": [
      "habana.ai/gaudi", "example.com/npu"
    ],
    "prefixes": [
      "tenstorrent.com/",`)
	edited = bundletest.Edited(t, edited, webhook.ResourceModelPath, `"HABANA_VISIBLE_DEVICES"`, `"HABANA_VISIBLE_DEVICES", "NEURON_RT_VISIBLE_DEVICES"`)
	edited = bundletest.Edited(t, edited, webhook.ResourceModelPath, `"/run/nvidia-container-devices"`, `"/run/nvidia-container-devices", "/opt/npu-device-list"`)
	edited = bundletest.Edited(t, edited, webhook.ResourceModelPath, `"cdi.k8s.io/"`, `"cdi.k8s.io/", "devices.example.io/"`)
	edited = bundletest.Edited(t, edited, webhook.ResourceModelPath, `"io.kubernetes.cri-o.Devices"`, `"io.kubernetes.cri-o.Devices", "npu.example.io"`)
	engine, err := policy.New(t.Context(), policy.Options{Bundle: edited, Deadline: patience.Deadline})
	if err != nil {
		t.Fatal(err)
	}
	h := handlerOver(t, engine)
	conds, err := webhook.MatchConditions(edited)
	if err != nil {
		t.Fatal(err)
	}
	shippedConds, err := webhook.MatchConditions(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	m, shipped := newMatcher(t, conds), newMatcher(t, shippedConds)
	kinds := readKinds(t, edited)
	for _, ft := range []feature{
		{"example.com/npu", func(spec, _ map[string]any) {
			addContainer(spec, 0, map[string]any{"resources": map[string]any{"limits": map[string]any{"example.com/npu": "4"}}})
		}},
		{"tenstorrent.com/n300", func(spec, _ map[string]any) {
			addContainer(spec, 1, map[string]any{"resources": map[string]any{"requests": map[string]any{"tenstorrent.com/n300": "1"}}})
		}},
		{"NEURON_RT_VISIBLE_DEVICES", func(spec, _ map[string]any) {
			addContainer(spec, 2, map[string]any{"env": []any{map[string]any{"name": "NEURON_RT_VISIBLE_DEVICES", "value": "0-3"}}})
		}},
		{"/opt/npu-device-list", func(spec, _ map[string]any) {
			addContainer(spec, 0, map[string]any{"volumeMounts": []any{map[string]any{"name": "d", "mountPath": "/opt/npu-device-list/x"}}})
		}},
		{"devices.example.io/ annotation", func(spec, meta map[string]any) {
			addContainer(spec, 0, map[string]any{})
			meta["annotations"] = map[string]any{"devices.example.io/npu": "all"}
		}},
		{"devices.example.io annotation", func(spec, meta map[string]any) {
			addContainer(spec, 1, map[string]any{})
			meta["annotations"] = map[string]any{"devices.example.io": "all"}
		}},
		{"npu.example.io annotation", func(spec, meta map[string]any) {
			addContainer(spec, 2, map[string]any{})
			meta["annotations"] = map[string]any{"npu.example.io": "all"}
		}},
	} {
		for _, key := range []string{"/Pod", "batch/Job", "kubeflow.org/PyTorchJob", "ray.io/RayCluster"} {
			k := kinds[key]
			group, version, kind := gvkOf(key)
			spec, meta := map[string]any{}, map[string]any{}
			ft.apply(spec, meta)
			r := rq{group: group, version: version, kind: kind, resource: k.Resource, op: "CREATE", ns: "team-a",
				obj: withTemplate(key, k, "w", spec, meta)}
			if resp := decide(t, h, r); resp.Allowed {
				t.Errorf("%s, %s: the edited bundle's policy allows it", key, ft.name)
			}
			if !m.sent(t, r) {
				t.Errorf("%s, %s: not sent by the conditions of the edited bundle", key, ft.name)
			}
			if shipped.sent(t, r) {
				t.Errorf("%s, %s: sent by the shipped conditions, which do not know the name", key, ft.name)
			}
		}
	}
}

// handlerOver is a webhook over engine with an empty ledger.
func handlerOver(t *testing.T, engine *policy.Engine) *webhook.Handler {
	t.Helper()
	store, err := bolt.Open(filepath.Join(t.TempDir(), "ledger.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ts, err := trust.Dev()
	if err != nil {
		t.Fatal(err)
	}
	tv, err := ticket.NewVerifier(ticket.VerifierOptions{Issuer: trust.DevTicketIssuer, Keys: ts.Tickets.KeySet()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(webhook.Options{Tickets: tv, Runs: webhook.LedgerRuns{Store: store}, Workloads: store,
		Policy: func() webhook.Decider { return engine }, Namespaces: map[string]string{"team-a": "acct_a"},
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func metaGVK(g, v, k string) metav1.GroupVersionKind {
	return metav1.GroupVersionKind{Group: g, Version: v, Kind: k}
}

func metaGVR(g, v, r string) metav1.GroupVersionResource {
	return metav1.GroupVersionResource{Group: g, Version: v, Resource: r}
}

// TestTeardownUpdates: after the run's cancel, an UPDATE of its bound Job
// that changes nothing that runs (finalizers or labels removed, annotations
// changed, suspended, also a Kubeflow job's runPolicy.suspend) is allowed;
// the conditions keep all but the nested suspend from the webhook at all,
// so they pass with itogate down. An UPDATE that changes what runs
// (parallelism, a resume, another ticket) is sent and refused.
func TestTeardownUpdates(t *testing.T) {
	f := newFixture(t)
	conds, err := webhook.MatchConditions(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	m := newMatcher(t, conds)
	stored := job("team-a", "train", "uid-job", f.ticket, 2, 8)
	stored["metadata"].(map[string]any)["finalizers"] = []any{"example.com/cleanup"}
	stored["metadata"].(map[string]any)["labels"] = map[string]any{"app": "train"}
	stored["spec"].(map[string]any)["suspend"] = false
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", stored, false))
	f.cancel(t)
	update := func(change func(md, spec map[string]any)) rq {
		obj := deepCopy(stored)
		change(obj["metadata"].(map[string]any), obj["spec"].(map[string]any))
		return rq{group: "batch", version: "v1", kind: "Job", resource: "jobs", op: "UPDATE", ns: "team-a", obj: obj, old: stored}
	}
	for _, c := range []struct {
		name        string
		r           rq
		sent, allow bool
		code        string
	}{
		{"finalizer removed", update(func(md, _ map[string]any) { delete(md, "finalizers") }), false, true, ""},
		{"label removed", update(func(md, _ map[string]any) { delete(md, "labels") }), false, true, ""},
		{"annotation added", update(func(md, _ map[string]any) {
			md["annotations"].(map[string]any)["example.com/note"] = "cancelled"
		}), false, true, ""},
		{"suspended", update(func(_, spec map[string]any) { spec["suspend"] = true }), false, true, ""},
		{"parallelism changed", update(func(_, spec map[string]any) { spec["parallelism"] = 1 }), true, false, "WORKLOAD_RUN_NOT_LIVE"},
		{"ticket removed", update(func(md, _ map[string]any) { delete(md["annotations"].(map[string]any), webhook.TicketAnnotation) }),
			true, false, "WORKLOAD_TICKET_MISSING"},
	} {
		if got := m.sent(t, c.r); got != c.sent {
			t.Errorf("%s: sent %v, want %v", c.name, got, c.sent)
		}
		resp := decide(t, f.h, c.r)
		if resp.Allowed != c.allow || (!c.allow && !strings.HasPrefix(resp.Result.Message, c.code+": ")) {
			t.Errorf("%s: %+v, want allowed %v %s", c.name, resp.Result, c.allow, c.code)
		}
	}
	// A resume of a suspended Job is sent and refused.
	suspended := deepCopy(stored)
	suspended["spec"].(map[string]any)["suspend"] = true
	resume := rq{group: "batch", version: "v1", kind: "Job", resource: "jobs", op: "UPDATE", ns: "team-a", obj: stored, old: suspended}
	if !m.sent(t, resume) {
		t.Error("a resume is not sent")
	}
	if resp := decide(t, f.h, resume); resp.Allowed {
		t.Error("a resume of a cancelled run's Job is allowed")
	}
	// A Kubeflow job's runPolicy.suspend is nested: sent, and allowed.
	pj := map[string]any{"metadata": map[string]any{"name": "pj", "namespace": "team-a",
		"annotations": map[string]any{webhook.TicketAnnotation: f.ticket}},
		"spec": map[string]any{"runPolicy": map[string]any{"suspend": false}, "pytorchReplicaSpecs": map[string]any{
			"Worker": map[string]any{"replicas": 1, "template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "t", "resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": 8}}}}}}}}}}
	pjSuspended := deepCopy(pj)
	pjSuspended["spec"].(map[string]any)["runPolicy"].(map[string]any)["suspend"] = true
	// Also where the stored job had no runPolicy at all.
	pjBare := deepCopy(pj)
	delete(pjBare["spec"].(map[string]any), "runPolicy")
	for _, old := range []map[string]any{pj, pjBare} {
		r := rq{group: "kubeflow.org", version: "v1", kind: "PyTorchJob", resource: "pytorchjobs", op: "UPDATE", ns: "team-a", obj: pjSuspended, old: old}
		if !m.sent(t, r) {
			t.Error("runPolicy.suspend: not sent")
		}
		if resp := decide(t, f.h, r); !resp.Allowed {
			t.Errorf("runPolicy.suspend of a cancelled run: %+v", resp.Result)
		}
	}
	// A runPolicy added with anything but a suspend changes what runs.
	pjCleanup := deepCopy(pjSuspended)
	pjCleanup["spec"].(map[string]any)["runPolicy"].(map[string]any)["cleanPodPolicy"] = "All"
	if resp := decide(t, f.h, rq{group: "kubeflow.org", version: "v1", kind: "PyTorchJob", resource: "pytorchjobs", op: "UPDATE",
		ns: "team-a", obj: pjCleanup, old: pjBare}); resp.Allowed {
		t.Error("a new runPolicy with cleanPodPolicy is taken for a teardown")
	}
}
