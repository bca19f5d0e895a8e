package deploy

import (
	"maps"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/itocompute/itogate/gatekeeper/webhook"
	"github.com/itocompute/itogate/policies"
)

const ticket = "eyJhbGciOiJFUzI1NiJ9.e30.sig" // its contents are the webhook's business, not the policies'

// pytorchJob is a PyTorchJob of two 8-GPU workers; ticketed, it carries
// itogate.io/ticket; finalizers are its metadata.finalizers.
func pytorchJob(ticketed bool, finalizers ...string) map[string]any {
	md := map[string]any{"name": "pj", "namespace": "team-a", "uid": "uid-pj"}
	if ticketed {
		md["annotations"] = map[string]any{"itogate.io/ticket": ticket}
	}
	if len(finalizers) > 0 {
		fs := make([]any, len(finalizers))
		for i, f := range finalizers {
			fs[i] = f
		}
		md["finalizers"] = fs
	}
	return map[string]any{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": md,
		"spec": map[string]any{"pytorchReplicaSpecs": map[string]any{"Worker": map[string]any{"replicas": int64(2),
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "pytorch", "image": "t",
				"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": int64(8)}}}}}}}}}}
}

// TestOrphanFinalizerOnTicketedWorkloads: for a custom resource the
// apiserver orphans the dependents of an object carrying the orphan
// finalizer when a DELETE names no propagation policy (the finalizer
// overrides the kind's default). itogate-workload-delete refuses that
// finalizer on a ticketed workload at CREATE (the reviewer's
// reproduction: a ticketed PyTorchJob created with finalizers [orphan],
// then deleted with empty options, orphans its Pods) and by UPDATE, and
// refuses such a DELETE of an object that has it; teardown goes on.
func TestOrphanFinalizerOnTicketedWorkloads(t *testing.T) {
	vaps, bindings := shippedPolicies(t)
	const policy = "itogate-workload-delete"
	p, b := vaps[policy], bindings[policy]
	if p == nil || b == nil {
		t.Fatalf("%s is not shipped", policy)
	}
	orphan, background := metav1.DeletePropagationOrphan, metav1.DeletePropagationBackground
	pj := func(op admission.Operation, obj, old map[string]any, opts runtime.Object) apiRequest {
		return apiRequest{group: "kubeflow.org", version: "v1", kind: "PyTorchJob", resource: "pytorchjobs", op: op,
			ns: "team-a", name: "pj", obj: obj, old: old, user: "alice", groups: []string{"team-a", "system:authenticated"}, options: opts}
	}
	withKind := func(group, version, kind, resource string, r apiRequest) apiRequest {
		r.group, r.version, r.kind, r.resource = group, version, kind, resource
		for _, o := range []map[string]any{r.obj, r.old} {
			if o != nil {
				o["apiVersion"], o["kind"] = group+"/"+version, kind
			}
		}
		return r
	}
	status := func(r apiRequest) apiRequest { r.sub = "status"; return r }
	withTicket := func(o map[string]any, ticket string) map[string]any {
		o["metadata"].(map[string]any)["annotations"].(map[string]any)["itogate.io/ticket"] = ticket
		return o
	}
	cases := []struct {
		name   string
		r      apiRequest
		refuse string // "" admitted; else a substring of the message after the code
	}{
		{"CREATE ticketed with the orphan finalizer", pj(admission.Create, pytorchJob(true, "orphan"), nil, nil),
			"the orphan finalizer would orphan its dependents"},
		{"CREATE ticketed JobSet with the orphan finalizer", withKind("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets",
			pj(admission.Create, pytorchJob(true, "orphan"), nil, nil)), "the orphan finalizer"},
		{"CREATE ticketed RayCluster with the orphan finalizer among others", withKind("ray.io", "v1", "RayCluster", "rayclusters",
			pj(admission.Create, pytorchJob(true, "example.com/keep", "orphan"), nil, nil)), "the orphan finalizer"},
		{"CREATE ticketed batch/v1 Job with the orphan finalizer", withKind("batch", "v1", "Job", "jobs",
			pj(admission.Create, pytorchJob(true, "orphan"), nil, nil)), "the orphan finalizer"},
		{"CREATE ticketed without it", pj(admission.Create, pytorchJob(true, "example.com/keep"), nil, nil), ""},
		{"CREATE without a ticket, with it (no GPUs itogate admitted)", pj(admission.Create, pytorchJob(false, "orphan"), nil, nil), ""},
		{"UPDATE adding it", pj(admission.Update, pytorchJob(true, "orphan"), pytorchJob(true), nil), "the orphan finalizer"},
		{"UPDATE adding a ticket to an object that has it", pj(admission.Update, pytorchJob(true, "orphan"), pytorchJob(false, "orphan"), nil),
			"the orphan finalizer"},
		{"UPDATE of an object that had both: another finalizer removed", pj(admission.Update, pytorchJob(true, "orphan"),
			pytorchJob(true, "orphan", "example.com/keep"), nil), ""},
		{"UPDATE of an object that had both: it removed", pj(admission.Update, pytorchJob(true), pytorchJob(true, "orphan"), nil), ""},
		{"DELETE with empty options of an object that has it", pj(admission.Delete, nil, pytorchJob(true, "orphan"), &metav1.DeleteOptions{}),
			"an object with the orphan finalizer, deleted without one orphans its dependents"},
		{"DELETE with no options at all of an object that has it", pj(admission.Delete, nil, pytorchJob(true, "orphan"), nil),
			"delete it with propagationPolicy Background or Foreground"},
		{"DELETE in the background of an object that has it (the apiserver drops the finalizer)",
			pj(admission.Delete, nil, pytorchJob(true, "orphan"), &metav1.DeleteOptions{PropagationPolicy: &background}), ""},
		{"DELETE with orphanDependents false of an object that has it",
			pj(admission.Delete, nil, pytorchJob(true, "orphan"), &metav1.DeleteOptions{OrphanDependents: new(bool)}), ""},
		{"DELETE with empty options of an object without it (a custom resource's default is background)",
			pj(admission.Delete, nil, pytorchJob(true), &metav1.DeleteOptions{}), ""},
		{"DELETE Orphan", pj(admission.Delete, nil, pytorchJob(true), &metav1.DeleteOptions{PropagationPolicy: &orphan}),
			"delete it with propagationPolicy Background or Foreground"},
		{"DELETE with empty options of a batch/v1 Job", withKind("batch", "v1", "Job", "jobs",
			pj(admission.Delete, nil, pytorchJob(true), &metav1.DeleteOptions{})), "a batch/v1 Job"},
		{"DELETE without a ticket, with it", pj(admission.Delete, nil, pytorchJob(false, "orphan"), &metav1.DeleteOptions{}), ""},
		// jobs/status takes new metadata: the ticket stays as it is there
		{"jobs/status removing the ticket", status(withKind("batch", "v1", "Job", "jobs",
			pj(admission.Update, pytorchJob(false), pytorchJob(true), nil))), "a status write may not change or remove"},
		{"jobs/status changing the ticket", status(withKind("batch", "v1", "Job", "jobs",
			pj(admission.Update, withTicket(pytorchJob(true), "other"), pytorchJob(true), nil))), "a status write may not change"},
		{"jobs/status keeping the ticket (the Job controller's writes)", status(withKind("batch", "v1", "Job", "jobs",
			pj(admission.Update, pytorchJob(true), pytorchJob(true), nil))), ""},
		{"jobs/status of a Job without a ticket", status(withKind("batch", "v1", "Job", "jobs",
			pj(admission.Update, pytorchJob(false), pytorchJob(false), nil))), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := evaluate(t, p, b, tc.r)
			switch {
			case tc.refuse == "" && v.refused:
				t.Fatalf("refused: %s", v.message)
			case tc.refuse != "" && !v.refused:
				t.Fatalf("admitted (matched %v), want WORKLOAD_ORPHANING_DELETE", v.matched)
			case tc.refuse != "" && (v.reason != metav1.StatusReasonForbidden ||
				!strings.HasPrefix(v.message, "WORKLOAD_ORPHANING_DELETE: "+tc.r.resource+"/pj carries an itogate admission ticket: ") ||
				!strings.Contains(v.message, tc.refuse)):
				t.Fatalf("refused %s %q, want Forbidden WORKLOAD_ORPHANING_DELETE with %q", v.reason, v.message, tc.refuse)
			}
		})
	}
}

// TestAdmissionPoliciesAreGenerated: the shipped policies are what
// `itogate webhook policies` prints for the embedded bundle, so the
// apiserver trusts the controller identities the webhook trusts.
func TestAdmissionPoliciesAreGenerated(t *testing.T) {
	want, err := webhook.AdmissionPolicies(AdmissionPolicies, policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(AdmissionPolicies) {
		t.Fatal("kubernetes/base/admissionpolicies.yaml is not current: " +
			"go run ./cmd/itogate webhook policies > deploy/kubernetes/base/admissionpolicies.yaml")
	}
}

// ticketedPod is a Job's Pod of 8 GPUs carrying the ticket (ticketed) and
// a controller reference to its Job, with labels and annotations.
func ticketedPod(ticketed bool, labels, annotations map[string]any, owners ...any) map[string]any {
	ann := map[string]any{}
	for k, v := range annotations {
		ann[k] = v
	}
	if ticketed {
		ann["itogate.io/ticket"] = ticket
	}
	md := map[string]any{"name": "train-0", "namespace": "team-a", "uid": "uid-train-0", "annotations": ann}
	if labels != nil {
		md["labels"] = labels
	}
	if owners != nil {
		md["ownerReferences"] = owners
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md,
		"spec": map[string]any{"containers": []any{map[string]any{"name": "trainer", "image": "t",
			"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": int64(8)}}}}}}
}

// TestTicketedPodMetadataGuarded: a tenant with the stock edit role may
// patch Pods; relabelling a Job's Pod makes the Job controller release it
// and start a replacement the webhook admits as the Job's child, any
// multiple of world_size on one ticket (the reviewer's reproduction: no
// shipped control saw a Pod UPDATE). itogate-ticketed-pods refuses a change
// to a ticketed Pod's labels, ownerReferences or ticket annotation by
// anyone but a listed controller or a cluster admin; every other change,
// and every change to a Pod without a ticket, goes on.
func TestTicketedPodMetadataGuarded(t *testing.T) {
	vaps, bindings := shippedPolicies(t)
	p, b := vaps[webhook.TicketedPodsPolicy], bindings[webhook.TicketedPodsPolicy]
	if p == nil || b == nil {
		t.Fatalf("%s is not shipped", webhook.TicketedPodsPolicy)
	}
	controllers, err := webhook.ControllerIdentities(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	const jobController = "system:serviceaccount:kube-system:job-controller"
	if !slices.Contains(controllers, jobController) {
		t.Fatalf("the bundle does not list %s: %v", jobController, controllers)
	}
	owner := map[string]any{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "uid-train",
		"controller": true, "blockOwnerDeletion": true}
	labels := map[string]any{"batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": "uid-train"}
	relabelled := map[string]any{"batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": "released"}
	stored := ticketedPod(true, labels, nil, owner)
	update := func(user string, groups []string, obj, old map[string]any) apiRequest {
		return apiRequest{version: "v1", kind: "Pod", resource: "pods", op: admission.Update, ns: "team-a", name: "train-0",
			obj: obj, old: old, user: user, groups: append(groups, "system:authenticated")}
	}
	tenant := []string{"team-a"}
	cases := []struct {
		name   string
		r      apiRequest
		refuse string // "" admitted; else what the message names
	}{
		{"tenant relabels", update("alice", tenant, ticketedPod(true, relabelled, nil, owner), stored), "labels"},
		{"tenant drops the labels", update("alice", tenant, ticketedPod(true, nil, nil, owner), stored), "labels"},
		{"tenant drops the controller reference", update("alice", tenant, ticketedPod(true, labels, nil), stored), "ownerReferences"},
		{"tenant names another owner", update("alice", tenant, ticketedPod(true, labels, nil, map[string]any{"apiVersion": "batch/v1",
			"kind": "Job", "name": "other", "uid": "uid-other", "controller": true}), stored), "ownerReferences"},
		{"tenant relabels and releases", update("alice", tenant, ticketedPod(true, relabelled, nil), stored), "labels, ownerReferences"},
		{"tenant swaps the ticket", update("alice", tenant, ticketedPod(false, labels, map[string]any{"itogate.io/ticket": "other"}, owner),
			stored), "the itogate.io/ticket annotation"},
		{"tenant removes the ticket", update("alice", tenant, ticketedPod(false, labels, nil, owner), stored), "the itogate.io/ticket annotation"},
		{"tenant adds a ticket to a Pod without one", update("alice", tenant, ticketedPod(true, labels, nil, owner),
			ticketedPod(false, labels, nil, owner)), "the itogate.io/ticket annotation"},
		{"a service account of the tenant's named like the Job controller", update("system:serviceaccount:team-a:job-controller",
			[]string{"system:serviceaccounts", "system:serviceaccounts:team-a"}, ticketedPod(true, relabelled, nil, owner), stored), "labels"},
		{"tenant annotates", update("alice", tenant, ticketedPod(true, labels, map[string]any{"note": "slow node"}, owner), stored), ""},
		{"tenant relabels a Pod without a ticket", update("alice", tenant, ticketedPod(false, relabelled, nil, owner),
			ticketedPod(false, labels, nil, owner)), ""},
		{"the Job controller releases the Pod", update(jobController, []string{"system:serviceaccounts", "system:serviceaccounts:kube-system"},
			ticketedPod(true, labels, nil), stored), ""},
		{"system:masters relabels", update("admin", []string{"system:masters"}, ticketedPod(true, relabelled, nil, owner), stored), ""},
		{"itogate:namespace-admins relabels", update("ops", []string{"itogate:namespace-admins"},
			ticketedPod(true, relabelled, nil, owner), stored), ""},
	}
	for _, id := range controllers {
		cases = append(cases, struct {
			name   string
			r      apiRequest
			refuse string
		}{"listed controller " + id + " adopts the Pod", update(id, nil, stored, ticketedPod(true, labels, nil)), ""})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := evaluate(t, p, b, tc.r)
			switch {
			case tc.refuse == "" && v.refused:
				t.Fatalf("refused: %s", v.message)
			case tc.refuse != "" && !v.refused:
				t.Fatalf("admitted (matched %v), want WORKLOAD_POD_METADATA_GUARDED", v.matched)
			case tc.refuse != "" && (v.reason != metav1.StatusReasonForbidden ||
				!strings.HasPrefix(v.message, "WORKLOAD_POD_METADATA_GUARDED: pod train-0 carries an itogate admission ticket: ") ||
				!strings.HasSuffix(v.message, " may change its "+tc.refuse)):
				t.Fatalf("refused %s %q, want Forbidden WORKLOAD_POD_METADATA_GUARDED ending in %q", v.reason, v.message, tc.refuse)
			}
		})
	}
	// pods/status is matched: a status write takes new labels and
	// annotations (the apiserver keeps only the stored spec and
	// ownerReferences), so whoever holds pods/status could relabel through
	// it. The kubelet's status writes change neither and pass.
	status := func(r apiRequest) apiRequest { r.sub = "status"; return r }
	withStatus := func(pod map[string]any) map[string]any {
		pod = maps.Clone(pod)
		pod["status"] = map[string]any{"phase": "Running"}
		return pod
	}
	v := evaluate(t, p, b, status(update("system:node:gpu-1", []string{"system:nodes"}, withStatus(stored), stored)))
	if !v.matched || v.refused {
		t.Fatalf("the kubelet's status write: matched %v refused %v (%s), want matched and admitted", v.matched, v.refused, v.message)
	}
	v = evaluate(t, p, b, status(update("alice", tenant, withStatus(ticketedPod(true, relabelled, nil, owner)), stored)))
	if !v.refused || !strings.HasSuffix(v.message, " may change its labels") {
		t.Fatalf("a relabel through pods/status: refused %v %q, want WORKLOAD_POD_METADATA_GUARDED naming the labels", v.refused, v.message)
	}
	v = evaluate(t, p, b, status(update("alice", tenant, ticketedPod(false, labels, nil, owner), stored)))
	if !v.refused || !strings.HasSuffix(v.message, " may change its the itogate.io/ticket annotation") {
		t.Fatalf("the ticket removed through pods/status: refused %v %q, want the ticket annotation named", v.refused, v.message)
	}
}

// withTolerations is a Pod spec (or a Pod template's) tolerating ts.
func withTolerations(ts ...map[string]any) map[string]any {
	l := make([]any, len(ts))
	for i, t := range ts {
		l[i] = t
	}
	spec := map[string]any{"containers": []any{map[string]any{"name": "trainer", "image": "t",
		"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": int64(8)}}}}}
	if len(ts) > 0 {
		spec["tolerations"] = l
	}
	return spec
}

// inKind wraps a Pod spec as the object of resource (group/version/kind).
func inKind(kind, name string, spec map[string]any) map[string]any {
	md := map[string]any{"name": name, "namespace": "team-z"}
	tmpl := map[string]any{"metadata": map[string]any{}, "spec": spec}
	switch kind {
	case "Pod":
		return map[string]any{"apiVersion": "v1", "kind": kind, "metadata": md, "spec": spec}
	case "PodTemplate":
		return map[string]any{"apiVersion": "v1", "kind": kind, "metadata": md, "template": tmpl}
	case "CronJob":
		return map[string]any{"apiVersion": "batch/v1", "kind": kind, "metadata": md, "spec": map[string]any{"schedule": "@daily",
			"jobTemplate": map[string]any{"spec": map[string]any{"template": tmpl}}}}
	default:
		return map[string]any{"kind": kind, "metadata": md, "spec": map[string]any{"template": tmpl}}
	}
}

var (
	tolerateGPU      = map[string]any{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}
	tolerateAMD      = map[string]any{"key": "amd.com/gpu", "operator": "Equal", "value": "present"}
	tolerateAll      = map[string]any{"operator": "Exists"}
	tolerateNotReady = map[string]any{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
)

// TestGPUTolerationsOutsideControlledNamespaces: the webhook reviews only
// namespaces labelled itogate.io/enforce, and GPU nodes are kept for them
// by a taint (docs/kubernetes.md, "Namespace selection"); a tenant writes
// her Pods' tolerations herself, so itogate-gpu-tolerations refuses a
// toleration of the GPU taint, or of every taint, in any other namespace
// (the reviewer's reproduction: a GPU Pod tolerating the taint in an
// unlabelled namespace reached no shipped control), in a Pod and in the
// Pod template of every built-in workload kind, at CREATE and when an
// UPDATE adds it. Controlled, warn-mode, exempt and system namespaces are
// not matched.
func TestGPUTolerationsOutsideControlledNamespaces(t *testing.T) {
	vaps, bindings := shippedPolicies(t)
	const policy = "itogate-gpu-tolerations"
	p, b := vaps[policy], bindings[policy]
	if p == nil || b == nil {
		t.Fatalf("%s is not shipped", policy)
	}
	kinds := map[string][4]string{ // kind: group, version, resource, name
		"Pod": {"", "v1", "pods", "trainer"}, "PodTemplate": {"", "v1", "podtemplates", "tmpl"},
		"Deployment": {"apps", "v1", "deployments", "web"}, "ReplicaSet": {"apps", "v1", "replicasets", "web-1"},
		"StatefulSet": {"apps", "v1", "statefulsets", "db"}, "DaemonSet": {"apps", "v1", "daemonsets", "agent"},
		"Job": {"batch", "v1", "jobs", "train"}, "CronJob": {"batch", "v1", "cronjobs", "nightly"},
	}
	req := func(kind, ns string, nsLabels map[string]string, op admission.Operation, spec, oldSpec map[string]any) apiRequest {
		k := kinds[kind]
		r := apiRequest{group: k[0], version: k[1], kind: kind, resource: k[2], op: op, ns: ns, nsLabels: nsLabels, name: k[3],
			obj: inKind(kind, k[3], spec), user: "alice", groups: []string{"team-z", "system:authenticated"}}
		if oldSpec != nil {
			r.old = inKind(kind, k[3], oldSpec)
		}
		return r
	}
	unlabelled := map[string]string{}
	cases := []struct {
		name   string
		r      apiRequest
		refuse string // "" admitted; else what the message says it tolerates
	}{
		{"unlabelled: the GPU taint", req("Pod", "team-z", unlabelled, admission.Create, withTolerations(tolerateGPU), nil),
			"the GPU taint nvidia.com/gpu"},
		{"unlabelled: the AMD GPU taint, by value", req("Pod", "team-z", unlabelled, admission.Create,
			withTolerations(tolerateNotReady, tolerateAMD), nil), "the GPU taint amd.com/gpu"},
		{"unlabelled: every taint", req("Pod", "team-z", unlabelled, admission.Create, withTolerations(tolerateAll), nil), "every taint"},
		{"unlabelled: both", req("Pod", "team-z", unlabelled, admission.Create, withTolerations(tolerateGPU, tolerateAll), nil),
			"the GPU taint nvidia.com/gpu, every taint"},
		{"itogate.io/enforce=false", req("Pod", "team-z", map[string]string{"itogate.io/enforce": "false"}, admission.Create,
			withTolerations(tolerateGPU), nil), "the GPU taint nvidia.com/gpu"},
		{"unlabelled: another taint", req("Pod", "team-z", unlabelled, admission.Create, withTolerations(tolerateNotReady), nil), ""},
		{"unlabelled: no toleration (the taint keeps it off GPU nodes)", req("Pod", "team-z", unlabelled, admission.Create,
			withTolerations(), nil), ""},
		{"unlabelled: an UPDATE adding it", req("Pod", "team-z", unlabelled, admission.Update, withTolerations(tolerateNotReady, tolerateGPU),
			withTolerations(tolerateNotReady)), "the GPU taint nvidia.com/gpu"},
		{"unlabelled: an UPDATE of an object that had it", req("Deployment", "team-z", unlabelled, admission.Update,
			withTolerations(tolerateGPU), withTolerations(tolerateGPU)), ""},
		{"controlled", req("Pod", "team-a", map[string]string{"itogate.io/enforce": "true"}, admission.Create,
			withTolerations(tolerateGPU, tolerateAll), nil), ""},
		{"warn mode", req("Pod", "team-w", map[string]string{"itogate.io/enforce": "warn"}, admission.Create,
			withTolerations(tolerateGPU), nil), ""},
		{"exempt", req("DaemonSet", "gpu-operator", map[string]string{"itogate.io/enforce": "exempt"}, admission.Create,
			withTolerations(tolerateGPU, tolerateAll), nil), ""},
		{"kube-system", req("DaemonSet", "kube-system", unlabelled, admission.Create, withTolerations(tolerateAll), nil), ""},
		// by name only: a tenant who may create namespaces can name one kube-x
		{"another kube-* namespace", req("DaemonSet", "kube-flannel", unlabelled, admission.Create, withTolerations(tolerateAll), nil),
			"every taint"},
		{"a kube-* namespace a tenant created", req("Pod", "kube-x", unlabelled, admission.Create, withTolerations(tolerateGPU), nil),
			"the GPU taint nvidia.com/gpu"},
		{"kube-public", req("DaemonSet", "kube-public", unlabelled, admission.Create, withTolerations(tolerateAll), nil), ""},
		{"kube-node-lease", req("DaemonSet", "kube-node-lease", unlabelled, admission.Create, withTolerations(tolerateAll), nil), ""},
		{"a labelled-exempt kube-* namespace", req("DaemonSet", "kube-flannel", map[string]string{"itogate.io/enforce": "exempt"},
			admission.Create, withTolerations(tolerateAll), nil), ""},
		{"itogate's own", req("Pod", "itogate-system", unlabelled, admission.Create, withTolerations(tolerateAll), nil), ""},
	}
	for kind := range kinds {
		cases = append(cases, struct {
			name   string
			r      apiRequest
			refuse string
		}{"unlabelled: a " + kind, req(kind, "team-z", unlabelled, admission.Create, withTolerations(tolerateGPU), nil),
			"the GPU taint nvidia.com/gpu"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := evaluate(t, p, b, tc.r)
			want := "WORKLOAD_GPU_TOLERATION_UNCONTROLLED: " + tc.r.resource + "/" + tc.r.name + " tolerates " + tc.refuse +
				" in namespace " + tc.r.ns + ", which is not under itogate control (itogate.io/enforce): GPU nodes are for controlled namespaces"
			switch {
			case tc.refuse == "" && v.refused:
				t.Fatalf("refused: %s", v.message)
			case tc.refuse != "" && !v.refused:
				t.Fatalf("admitted (matched %v), want WORKLOAD_GPU_TOLERATION_UNCONTROLLED", v.matched)
			case tc.refuse != "" && (v.reason != metav1.StatusReasonForbidden || v.message != want):
				t.Fatalf("refused %s %q, want Forbidden %q", v.reason, v.message, want)
			}
		})
	}
}

// TestEveryNamespaceIsReviewedOrGuarded: for every way a namespace can be
// labelled, GPU Pods there are reviewed by the enforcing webhook, or their
// GPU toleration is refused by itogate-gpu-tolerations, unless a cluster
// admin made it warn-mode or exempt, or it is a system namespace: nobody
// forgot a namespace.
func TestEveryNamespaceIsReviewedOrGuarded(t *testing.T) {
	vaps, _ := shippedPolicies(t)
	p := vaps["itogate-gpu-tolerations"]
	guard, err := metav1.LabelSelectorAsSelector(p.Spec.MatchConstraints.NamespaceSelector)
	if err != nil {
		t.Fatal(err)
	}
	var vwc struct {
		Webhooks []struct {
			Name              string                `json:"name"`
			NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector"`
		} `json:"webhooks"`
	}
	if err := k8syaml.Unmarshal(WebhookConfiguration, &vwc); err != nil {
		t.Fatal(err)
	}
	var enforcing labels.Selector
	for _, w := range vwc.Webhooks {
		if w.Name == "workloads.itogate.io" {
			if enforcing, err = metav1.LabelSelectorAsSelector(w.NamespaceSelector); err != nil {
				t.Fatal(err)
			}
		}
	}
	if enforcing == nil {
		t.Fatal("no enforcing webhook")
	}
	system := map[string]bool{"kube-system": true, "kube-public": true, "kube-node-lease": true, "itogate-system": true}
	for _, ns := range []string{"team-a", "default", "kube-system", "kube-public", "kube-node-lease", "itogate-system", "gpu-operator", "kube-x", "kube-flannel"} {
		for _, value := range []string{"", "true", "warn", "exempt", "false", "True", "yes"} {
			set := labels.Set{"kubernetes.io/metadata.name": ns}
			if value != "" {
				set["itogate.io/enforce"] = value
			}
			reviewed, guarded := enforcing.Matches(set), guard.Matches(set)
			switch {
			case reviewed && guarded:
				t.Errorf("%s %v: both reviewed and guarded (a controlled namespace's tolerations are its own)", ns, set)
			case !reviewed && !guarded && !system[ns] && value != "warn" && value != "exempt":
				t.Errorf("%s %v: neither reviewed by the webhook nor guarded", ns, set)
			case guarded && (system[ns] || value == "warn" || value == "exempt"):
				t.Errorf("%s %v: guarded, want it left alone", ns, set)
			}
		}
	}
}

// TestPodDeletionGraceBounded: a deleted Pod keeps its GPUs for its grace
// period while its controller starts a replacement on the same ticket, and
// DeleteOptions.gracePeriodSeconds overrides the Pod's own bounded
// terminationGracePeriodSeconds (the reviewer's reproduction: kubectl
// delete pod --grace-period=86400 of a Job's Pod, never seen by the
// webhook). itogate-pod-deletion refuses a DELETE of a ticketed Pod and
// an eviction of any Pod asking for more than the bundle's bound, in an
// enforced namespace, to anyone but a cluster admin.
func TestPodDeletionGraceBounded(t *testing.T) {
	vaps, bindings := shippedPolicies(t)
	p, b := vaps[webhook.PodDeletionPolicy], bindings[webhook.PodDeletionPolicy]
	if p == nil || b == nil {
		t.Fatalf("%s is not shipped", webhook.PodDeletionPolicy)
	}
	max, err := webhook.MaxGraceSeconds(policies.Bundle())
	if err != nil {
		t.Fatal(err)
	}
	grace := func(s int64) *int64 { return &s }
	enforced := map[string]string{"itogate.io/enforce": "true"}
	tenant := []string{"team-a", "system:authenticated"}
	del := func(pod map[string]any, opts *metav1.DeleteOptions) apiRequest {
		return apiRequest{version: "v1", kind: "Pod", resource: "pods", op: admission.Delete, ns: "team-a", nsLabels: enforced,
			name: "train-0", old: pod, user: "alice", groups: tenant, options: opts}
	}
	evict := func(opts map[string]any) apiRequest {
		e := map[string]any{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": map[string]any{"name": "train-0", "namespace": "team-a"}}
		if opts != nil {
			e["deleteOptions"] = opts
		}
		return apiRequest{kindGroup: "policy", version: "v1", kind: "Eviction", resource: "pods", sub: "eviction", op: admission.Create,
			ns: "team-a", nsLabels: enforced, name: "train-0", obj: e, user: "alice", groups: tenant, options: &metav1.CreateOptions{}}
	}
	with := func(r apiRequest, f func(*apiRequest)) apiRequest { f(&r); return r }
	withGrace := func(pod map[string]any, s int64) map[string]any {
		pod["spec"].(map[string]any)["terminationGracePeriodSeconds"] = s
		return pod
	}
	cases := []struct {
		name   string
		r      apiRequest
		refuse string // "" admitted; else a substring of the message after the code
	}{
		{"DELETE of a ticketed Pod, a day's grace", del(ticketedPod(true, nil, nil), &metav1.DeleteOptions{GracePeriodSeconds: grace(86400)}),
			"the delete of pod train-0 asks for gracePeriodSeconds 86400, above 600"},
		{"DELETE of a ticketed Pod, one second above", del(ticketedPod(true, nil, nil), &metav1.DeleteOptions{GracePeriodSeconds: grace(max + 1)}),
			"above 600"},
		{"eviction asking for a day", evict(map[string]any{"gracePeriodSeconds": int64(86400)}), "the eviction of pod train-0 asks for gracePeriodSeconds 86400"},
		{"DELETE at the bound", del(ticketedPod(true, nil, nil), &metav1.DeleteOptions{GracePeriodSeconds: grace(max)}), ""},
		{"DELETE now", del(ticketedPod(true, nil, nil), &metav1.DeleteOptions{GracePeriodSeconds: grace(0)}), ""},
		{"DELETE without a grace period", del(ticketedPod(true, nil, nil), &metav1.DeleteOptions{}), ""},
		{"DELETE with no options", del(ticketedPod(true, nil, nil), nil), ""},
		{"DELETE of a Pod admitted before the bound, at its own grace", del(withGrace(ticketedPod(true, nil, nil), 3600),
			&metav1.DeleteOptions{GracePeriodSeconds: grace(3600)}), ""},
		{"DELETE of a Pod admitted before the bound, above its own grace", del(withGrace(ticketedPod(true, nil, nil), 3600),
			&metav1.DeleteOptions{GracePeriodSeconds: grace(3601)}), "asks for gracePeriodSeconds 3601, above 600"},
		{"DELETE of a Pod without a ticket", del(ticketedPod(false, nil, nil), &metav1.DeleteOptions{GracePeriodSeconds: grace(86400)}), ""},
		{"eviction without options", evict(nil), ""},
		{"eviction at the bound", evict(map[string]any{"gracePeriodSeconds": max}), ""},
		{"a cluster admin's DELETE", with(del(ticketedPod(true, nil, nil), &metav1.DeleteOptions{GracePeriodSeconds: grace(86400)}),
			func(r *apiRequest) { r.user, r.groups = "root", []string{"system:masters"} }), ""},
		{"an unenforced namespace", with(del(ticketedPod(true, nil, nil), &metav1.DeleteOptions{GracePeriodSeconds: grace(86400)}),
			func(r *apiRequest) { r.nsLabels = map[string]string{"itogate.io/enforce": "warn"} }), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantVerdict(t, evaluate(t, p, b, tc.r), "WORKLOAD_DELETE_GRACE_TOO_LONG", tc.refuse)
		})
	}
	// The delete cases that must match did: a policy that never applied
	// would admit them all.
	if v := evaluate(t, p, b, del(ticketedPod(true, nil, nil), &metav1.DeleteOptions{})); !v.matched {
		t.Fatal("a tenant's DELETE of a ticketed Pod in an enforced namespace did not match the policy")
	}
}

// TestPodDeviceAnnotationsGuarded: the kubelet passes a Pod's current
// annotations to the runtime whenever it re-creates the Pod's sandbox, and
// NRI plugins read them at every container start, so a device-injecting
// annotation added to a running Pod gives it devices the scheduler never
// counted (the security review's reproduction: kubectl annotate pod p
// nvidia.cdi.k8s.io/container.c=nvidia.com/gpu=all, stock edit role, never
// sent to the webhook). itogate-pod-device-annotations refuses an UPDATE of
// any Pod in an enforced namespace that adds one (a key under a prefix, a
// prefix without its slash, a listed key) or changes its value, to anyone
// but a cluster admin; removing one and every other annotation go on.
func TestPodDeviceAnnotationsGuarded(t *testing.T) {
	vaps, bindings := shippedPolicies(t)
	p, b := vaps[webhook.DeviceAnnotationsPolicy], bindings[webhook.DeviceAnnotationsPolicy]
	if p == nil || b == nil {
		t.Fatalf("%s is not shipped", webhook.DeviceAnnotationsPolicy)
	}
	enforced := map[string]string{"itogate.io/enforce": "true"}
	update := func(old, obj map[string]any) apiRequest {
		return apiRequest{version: "v1", kind: "Pod", resource: "pods", op: admission.Update, ns: "team-a", nsLabels: enforced,
			name: "train-0", obj: obj, old: old, user: "alice", groups: []string{"team-a", "system:authenticated"},
			options: &metav1.UpdateOptions{}}
	}
	ann := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	// A Pod without a ticket: a CPU Pod, its annotations only.
	cpuPod := func(annotations map[string]any) map[string]any {
		pod := ticketedPod(false, nil, annotations)
		pod["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["resources"] = map[string]any{}
		return pod
	}
	with := func(r apiRequest, f func(*apiRequest)) apiRequest { f(&r); return r }
	const all = "nvidia.com/gpu=all"
	cases := []struct {
		name   string
		r      apiRequest
		refuse string // "" admitted; else a substring of the message after the code
	}{
		{"a CDI key under a prefix added to a ticketed Pod", update(ticketedPod(true, nil, nil),
			ticketedPod(true, nil, ann("nvidia.cdi.k8s.io/container.trainer", all))), "annotation nvidia.cdi.k8s.io/container.trainer"},
		{"an NRI key under a prefix added", update(ticketedPod(true, nil, nil),
			ticketedPod(true, nil, ann("devices.noderesource.dev/pod", "- path: /dev/nvidia0"))), "devices.noderesource.dev/pod"},
		{"a generic CDI key added", update(ticketedPod(true, nil, nil), ticketedPod(true, nil, ann("cdi.k8s.io/x", all))), "cdi.k8s.io/x"},
		{"a prefix without its slash added", update(ticketedPod(true, nil, nil),
			ticketedPod(true, nil, ann("devices.nri.io", "- path: /dev/nvidia0"))), "devices.nri.io"},
		{"a listed key added", update(ticketedPod(true, nil, nil),
			ticketedPod(true, nil, ann("io.kubernetes.cri-o.Devices", "/dev/nvidia0"))), "io.kubernetes.cri-o.Devices"},
		{"a CDI key added to a Pod without a ticket", update(cpuPod(nil), cpuPod(ann("cdi.k8s.io/x", all))), "pod train-0"},
		{"a Pod without annotations gets one", update(func() map[string]any {
			pod := cpuPod(nil)
			delete(pod["metadata"].(map[string]any), "annotations")
			return pod
		}(), cpuPod(ann("cdi.k8s.io/x", all))), "cdi.k8s.io/x"},
		{"a device annotation's value changed", update(ticketedPod(true, nil, ann("cdi.k8s.io/x", "nvidia.com/gpu=0")),
			ticketedPod(true, nil, ann("cdi.k8s.io/x", all))), "cdi.k8s.io/x"},
		{"a device annotation removed", update(ticketedPod(true, nil, ann("cdi.k8s.io/x", "nvidia.com/gpu=0")),
			ticketedPod(true, nil, nil)), ""},
		{"a device annotation kept, another added", update(ticketedPod(true, nil, ann("cdi.k8s.io/x", "nvidia.com/gpu=0")),
			ticketedPod(true, nil, ann("cdi.k8s.io/x", "nvidia.com/gpu=0", "example.com/note", "x"))), ""},
		{"an unrelated annotation added", update(ticketedPod(true, nil, nil), ticketedPod(true, nil, ann("example.com/note", "x"))), ""},
		{"a look-alike key (no prefix match)", update(cpuPod(nil), cpuPod(ann("example.com/cdi.k8s.io", all))), ""},
		{"a cluster admin adds one", with(update(ticketedPod(true, nil, nil), ticketedPod(true, nil, ann("cdi.k8s.io/x", all))),
			func(r *apiRequest) { r.user, r.groups = "root", []string{"system:masters"} }), ""},
		{"a namespace admin adds one", with(update(ticketedPod(true, nil, nil), ticketedPod(true, nil, ann("cdi.k8s.io/x", all))),
			func(r *apiRequest) {
				r.user, r.groups = "ops", []string{"itogate:namespace-admins", "system:authenticated"}
			}), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantVerdict(t, evaluate(t, p, b, tc.r), "WORKLOAD_DEVICE_ANNOTATION_GUARDED", tc.refuse)
		})
	}
	// Not matched outside an enforced namespace, nor for anything but a Pod
	// UPDATE; matched for a tenant's UPDATE in one (a policy that never
	// applied would admit every case above).
	add := update(ticketedPod(true, nil, nil), ticketedPod(true, nil, ann("cdi.k8s.io/x", all)))
	for _, labels := range []map[string]string{nil, {"itogate.io/enforce": "warn"}, {"itogate.io/enforce": "exempt"}} {
		if v := evaluate(t, p, b, with(add, func(r *apiRequest) { r.nsLabels = labels })); v.matched || v.refused {
			t.Errorf("namespace labels %v: matched %v refused %v, want the policy not to apply", labels, v.matched, v.refused)
		}
	}
	create := with(add, func(r *apiRequest) { r.op, r.old, r.options = admission.Create, nil, &metav1.CreateOptions{} })
	if v := evaluate(t, p, b, create); v.matched {
		t.Error("a Pod CREATE matched: the webhook judges it")
	}
	if v := evaluate(t, p, b, add); !v.matched {
		t.Fatal("a tenant's Pod UPDATE in an enforced namespace did not match the policy")
	}
	// pods/status takes new annotations too: refused there alike.
	viaStatus := with(add, func(r *apiRequest) { r.sub = "status" })
	wantVerdict(t, evaluate(t, p, b, viaStatus), "WORKLOAD_DEVICE_ANNOTATION_GUARDED", "cdi.k8s.io/x")
}

// TestReviewNoPolicyGuardsDeviceAnnotations (security review finding, its
// reproduction kept): a tenant's UPDATE adding a device-injecting
// annotation to a ticketed Pod in an enforced namespace is refused by a
// shipped policy, whichever it is.
func TestReviewNoPolicyGuardsDeviceAnnotations(t *testing.T) {
	vaps, bindings := shippedPolicies(t)
	old := ticketedPod(true, nil, nil)
	for _, key := range []string{"nvidia.cdi.k8s.io/container.trainer", "devices.noderesource.dev/pod", "cdi.k8s.io/x"} {
		upd := ticketedPod(true, nil, map[string]any{key: "nvidia.com/gpu=all"})
		refused := false
		for name, p := range vaps {
			b := bindings[name]
			if b == nil {
				continue
			}
			v := evaluate(t, p, b, apiRequest{version: "v1", kind: "Pod", resource: "pods", op: admission.Update, ns: "team-a",
				nsLabels: map[string]string{"itogate.io/enforce": "true"}, name: "train-0", obj: upd, old: old,
				user: "alice", groups: []string{"team-a", "system:authenticated"}})
			refused = refused || v.refused
		}
		if !refused {
			t.Errorf("a tenant's UPDATE adding %s to a ticketed Pod: no shipped policy refuses it", key)
		}
	}
}

// wantVerdict: v is admitted when refuse is empty, else a Forbidden
// refusal whose message starts with code and holds refuse.
func wantVerdict(t *testing.T, v verdict, code, refuse string) {
	t.Helper()
	switch {
	case refuse == "" && v.refused:
		t.Fatalf("refused: %s", v.message)
	case refuse != "" && !v.refused:
		t.Fatalf("admitted (matched %v), want %s", v.matched, code)
	case refuse != "" && (v.reason != metav1.StatusReasonForbidden ||
		!strings.HasPrefix(v.message, code+": ") || !strings.Contains(v.message, refuse)):
		t.Fatalf("refused %s %q, want Forbidden %s with %q", v.reason, v.message, code, refuse)
	}
}
