package webhook_test

import (
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/bundle/bundletest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/webhook"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

// The engine tells the webhook which annotations inject devices.
var _ interface{ DeviceAnnotation(string) bool } = (*policy.Engine)(nil)

// withAnnotations is a copy of obj with the annotations set (an empty
// value: removed).
func withAnnotations(obj map[string]any, kv ...string) map[string]any {
	out := deepCopy(obj)
	md := out["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(ann, kv[i])
			continue
		}
		ann[kv[i]] = kv[i+1]
	}
	return out
}

// TestReviewDeviceAnnotationAddedByUpdate (security review finding, its
// reproduction kept): a device-injecting annotation added to a running Pod
// by a metadata-only UPDATE (kubectl annotate, stock edit role) is sent to
// the webhook (matchCondition changes-what-runs) and refused
// WORKLOAD_GPU_ACCESS_UNCOUNTED, the Pod holding no whole node: the kubelet
// passes a Pod's current annotations to the runtime whenever it re-creates
// the Pod's sandbox, and NRI plugins read them at every CreateContainer.
// The apiserver's itogate-pod-device-annotations refuses it first
// (deploy TestPodDeviceAnnotationsGuarded).
func TestReviewDeviceAnnotationAddedByUpdate(t *testing.T) {
	f := newFixture(t)
	conds, err := webhook.MatchConditions(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	m := newMatcher(t, conds)
	cpu := pod("team-a", "p2", "uid-p2", "", "", 0)
	cpu["metadata"].(map[string]any)["annotations"] = map[string]any{}
	cpu["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["resources"] = map[string]any{}
	for _, c := range []struct {
		name   string
		stored map[string]any
	}{
		{"ticketed 1-GPU Pod", pod("team-a", "p1", "uid-p1", "", f.ticket, 1)},
		{"CPU Pod without a ticket", cpu},
	} {
		for _, key := range []string{"nvidia.cdi.k8s.io/container.t", "devices.noderesource.dev/pod", "cdi.k8s.io/x",
			"devices.nri.io", "io.kubernetes.cri-o.Devices"} {
			r := rq{group: "", version: "v1", kind: "Pod", resource: "pods", op: "UPDATE", ns: "team-a",
				obj: withAnnotations(c.stored, key, "nvidia.com/gpu=all"), old: c.stored}
			if !m.sent(t, r) {
				t.Errorf("%s: UPDATE adding %s is not sent to the webhook", c.name, key)
			}
			// CDI names the node's GPUs; the NRI and CRI-O keys inject any
			// host device or mount.
			says := "annotation " + key + " injects host devices or mounts"
			if strings.Contains(key, "cdi.k8s.io") {
				says = "annotation " + key + " injects devices"
			}
			resp := decide(t, f.h, r)
			if resp.Allowed || resp.Result == nil ||
				!strings.HasPrefix(resp.Result.Message, "WORKLOAD_GPU_ACCESS_UNCOUNTED: ") ||
				!strings.Contains(resp.Result.Message, says) {
				t.Errorf("%s: UPDATE adding %s: %+v, want WORKLOAD_GPU_ACCESS_UNCOUNTED naming it", c.name, key, resp.Result)
			}
		}
	}
}

// TestDeviceAnnotationUpdateIsNoTeardown: a Pod UPDATE that adds a device
// annotation or changes its value changes what runs: it is sent and judged
// by the whole policy, never passed as a teardown (a cancelled run's Pod is
// refused WORKLOAD_RUN_NOT_LIVE, though it holds a whole node and may carry
// the annotation). Removing one, or any other annotation change, stays a
// teardown: not sent, and allowed when sent; another change of a Pod is
// not sent (the rules route Pod UPDATEs for device annotations alone). A
// decider that cannot tell device annotations takes every added
// annotation for one.
func TestDeviceAnnotationUpdateIsNoTeardown(t *testing.T) {
	f := newFixture(t)
	conds, err := webhook.MatchConditions(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	m := newMatcher(t, conds)
	// A whole node of the ticket (8 of gpus_per_node 8), created with a CDI
	// annotation: the policy's access rule allows it.
	stored := withAnnotations(pod("team-a", "whole", "uid-whole", "", f.ticket, 8), "cdi.k8s.io/x", "nvidia.com/gpu=0")
	wantAllowed(t, post(t, f.h, "", "v1", "Pod", stored, false))
	update := func(obj map[string]any) rq {
		return rq{group: "", version: "v1", kind: "Pod", resource: "pods", op: "UPDATE", ns: "team-a", obj: obj, old: stored}
	}
	// Live: a whole-node Pod may take another CDI annotation; the policy decides.
	live := update(withAnnotations(stored, "nvidia.cdi.k8s.io/container.t", "nvidia.com/gpu=all"))
	if !m.sent(t, live) {
		t.Error("a whole-node Pod's new CDI annotation is not sent")
	}
	wantAllowed(t, decide(t, f.h, live))

	f.cancel(t)
	for _, c := range []struct {
		name        string
		r           rq
		sent, allow bool
	}{
		{"device annotation added", update(withAnnotations(stored, "cdi.nri.io/container.t", "nvidia.com/gpu=all")), true, false},
		{"device annotation changed", update(withAnnotations(stored, "cdi.k8s.io/x", "nvidia.com/gpu=all")), true, false},
		{"device annotation removed", update(withAnnotations(stored, "cdi.k8s.io/x", "")), false, true},
		{"another annotation added", update(withAnnotations(stored, "example.com/note", "cancelled")), false, true},
	} {
		if got := m.sent(t, c.r); got != c.sent {
			t.Errorf("%s: sent %v, want %v", c.name, got, c.sent)
		}
		resp := decide(t, f.h, c.r)
		if resp.Allowed != c.allow || (!c.allow && !strings.HasPrefix(resp.Result.Message, "WORKLOAD_RUN_NOT_LIVE: ")) {
			t.Errorf("%s: %+v, want allowed %v (else WORKLOAD_RUN_NOT_LIVE)", c.name, resp.Result, c.allow)
		}
	}
	// Pod UPDATEs are routed for device annotations alone: another change
	// of a Pod (its image) is not sent, as before.
	image := deepCopy(stored)
	image["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["image"] = "t:2"
	if m.sent(t, update(image)) {
		t.Error("a Pod's image change is sent")
	}
	// Not a Pod: a Job's own annotations inject nothing; its pod template's
	// are its spec, sent anyway.
	jobStored := job("team-a", "j", "uid-j", "", 1, 0)
	if m.sent(t, rq{group: "batch", version: "v1", kind: "Job", resource: "jobs", op: "UPDATE", ns: "team-a",
		obj: withAnnotations(jobStored, "cdi.k8s.io/x", "nvidia.com/gpu=all"), old: jobStored}) {
		t.Error("a Job's own new CDI annotation is sent: only a Pod's inject devices")
	}

	// A decider that cannot tell: every added annotation counts.
	opaque := f.opts
	engine := f.opts.Policy()
	opaque.Policy = func() webhook.Decider { return struct{ webhook.Decider }{engine} }
	h, err := webhook.New(opaque)
	if err != nil {
		t.Fatal(err)
	}
	if resp := decide(t, h, update(withAnnotations(stored, "example.com/note", "x"))); resp.Allowed ||
		!strings.HasPrefix(resp.Result.Message, "WORKLOAD_RUN_NOT_LIVE: ") {
		t.Errorf("an opaque decider: another annotation added: %+v, want WORKLOAD_RUN_NOT_LIVE", resp.Result)
	}
	wantAllowed(t, decide(t, h, update(withAnnotations(stored, "cdi.k8s.io/x", ""))))
}

// TestDeviceAnnotationUpdatesFollowTheModel: a device annotation prefix an
// operator adds to the bundle's resource model is sent on a Pod UPDATE by
// the conditions generated from it, and is no teardown to its engine; the
// shipped conditions and the embedded engine do not take it for one.
func TestDeviceAnnotationUpdatesFollowTheModel(t *testing.T) {
	edited := bundletest.Edited(t, policies.Bundle(), webhook.ResourceModelPath, `"cdi.k8s.io/"`, `"cdi.k8s.io/", "devices.example.io/"`)
	engine, err := policy.New(t.Context(), policy.Options{Bundle: edited, Deadline: patience.Deadline})
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := policy.New(t.Context(), policy.Options{Bundle: policies.Bundle(), Deadline: patience.Deadline})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"devices.example.io/x": true, "devices.example.io": true, "example.io/devices": false} {
		if got := engine.DeviceAnnotation(key); got != want {
			t.Errorf("edited engine: DeviceAnnotation(%q) %v, want %v", key, got, want)
		}
		if embedded.DeviceAnnotation(key) {
			t.Errorf("embedded engine: DeviceAnnotation(%q) true", key)
		}
	}
	conds, err := webhook.MatchConditions(edited)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := webhook.MatchConditions(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	stored := pod("team-a", "p", "uid-p", "", "", 0)
	stored["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["resources"] = map[string]any{}
	r := rq{group: "", version: "v1", kind: "Pod", resource: "pods", op: "UPDATE", ns: "team-a",
		obj: withAnnotations(stored, "devices.example.io/pod", "- path: /dev/npu0"), old: stored}
	if !newMatcher(t, conds).sent(t, r) {
		t.Error("the edited model's device annotation is not sent")
	}
	if newMatcher(t, shipped).sent(t, r) {
		t.Error("the shipped conditions send an annotation the shipped model does not list")
	}
}
