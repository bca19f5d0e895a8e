package webhook_test

import (
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/webhook"
)

// kuberay is KubeRay's operator, a controller the bundle lists.
const kuberay = "system:serviceaccount:ray-system:kuberay-operator"

// rayClusterSpec is a RayCluster spec: a head without GPUs and workers
// Pods of 8 GPUs each.
func rayClusterSpec(workers int) map[string]any {
	gpuPod := map[string]any{"containers": []any{map[string]any{"name": "w", "image": "ray",
		"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": 8}}}}}
	return map[string]any{
		"headGroupSpec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "h", "image": "ray"}}}}},
		"workerGroupSpecs": []any{map[string]any{"groupName": "gpu", "replicas": workers, "minReplicas": workers,
			"maxReplicas": workers, "template": map[string]any{"spec": gpuPod}}},
	}
}

// rayService is a RayService of one cluster of workers × 8 GPUs, sent by
// a tenant.
func rayService(name, uid, ticket string, workers int) map[string]any {
	return map[string]any{"apiVersion": "ray.io/v1", "kind": "RayService",
		"metadata": map[string]any{"name": name, "namespace": "team-a", "uid": uid,
			"annotations": map[string]any{webhook.TicketAnnotation: ticket}},
		"spec": map[string]any{"rayClusterConfig": rayClusterSpec(workers)}}
}

// rayCluster is a RayCluster of workers × 8 GPUs that KubeRay created for
// the RayService of uid owner.
func rayCluster(name, uid, owner, ticket string, workers int) map[string]any {
	return map[string]any{"apiVersion": "ray.io/v1", "kind": "RayCluster",
		"metadata": map[string]any{"name": name, "namespace": "team-a", "uid": uid,
			"annotations": map[string]any{webhook.TicketAnnotation: ticket, "test/requester": kuberay},
			"ownerReferences": []any{map[string]any{"apiVersion": "ray.io/v1", "kind": "RayService", "name": "serve",
				"uid": owner, "controller": true}}},
		"spec": rayClusterSpec(workers)}
}

// TestRayServiceUpgradeCharged: a RayService of 16 GPUs on a run of 16.
// KubeRay's first RayCluster (16) is admitted; a zero-downtime upgrade's
// second RayCluster (16, another name) while the first runs is refused
// WORKLOAD_GPUS_EXCEED_RUN naming the figures, and nothing is recorded;
// the first one's Pods and an identical retry of its create are still
// allowed. A RayCluster re-created under the first one's name takes its
// charge over.
func TestRayServiceUpgradeCharged(t *testing.T) {
	f := newFixture(t)
	wantAllowed(t, post(t, f.h, "ray.io", "v1", "RayService", rayService("serve", "svc-1", f.ticket, 2), false))
	first := rayCluster("serve-raycluster-aaaaa", "rc-a", "svc-1", f.ticket, 2)
	wantAllowed(t, post(t, f.h, "ray.io", "v1", "RayCluster", first, false))

	r := post(t, f.h, "ray.io", "v1", "RayCluster", rayCluster("serve-raycluster-bbbbb", "rc-b", "svc-1", f.ticket, 2), false)
	wantDenied(t, r, "WORKLOAD_GPUS_EXCEED_RUN")
	if want := "16 GPUs requested beside the 16 GPUs its controller's other children hold, 16 admitted"; !strings.Contains(r.Result.Message, want) {
		t.Fatalf("message %q, want %q", r.Result.Message, want)
	}
	charged := []ledger.WorkloadCharge{{OwnerUID: "svc-1", Name: "ray.io/RayCluster/team-a/serve-raycluster-aaaaa", UID: "rc-a", GPUs: 16}}
	wantCharged := func(what string, uids []string, charges []ledger.WorkloadCharge) {
		t.Helper()
		b, err := f.store.WorkloadBinding(t.Context(), f.runID)
		if err != nil || b.Identity != "ray.io/RayService/team-a/serve" || strings.Join(b.UIDs, ",") != strings.Join(uids, ",") ||
			len(b.Charges) != len(charges) {
			t.Fatalf("%s: binding %+v, %v; want uids %v, charges %+v", what, b, err, uids, charges)
		}
		for i := range charges {
			if b.Charges[i] != charges[i] {
				t.Fatalf("%s: charge %d = %+v, want %+v", what, i, b.Charges[i], charges[i])
			}
		}
	}
	wantCharged("after the refused upgrade", []string{"svc-1", "rc-a"}, charged)

	wantAllowed(t, post(t, f.h, "ray.io", "v1", "RayCluster", first, false))
	p := pod("team-a", "serve-raycluster-aaaaa-gpu-0", "pod-a0", "rc-a", f.ticket, 8)
	p["metadata"].(map[string]any)["annotations"].(map[string]any)["test/requester"] = kuberay
	wantAllowed(t, post(t, f.h, "", "v1", "Pod", p, false))
	wantCharged("after the retry and a Pod", []string{"svc-1", "rc-a"}, charged)

	// The first RayCluster deleted and re-created under its name.
	wantAllowed(t, post(t, f.h, "ray.io", "v1", "RayCluster", rayCluster("serve-raycluster-aaaaa", "rc-a2", "svc-1", f.ticket, 2), false))
	charged[0].UID = "rc-a2"
	wantCharged("after the re-create", []string{"svc-1", "rc-a", "rc-a2"}, charged)
}
