//go:build k8s

// Package k8s tests the workload boundary against a real kube-apiserver
// (`make test-k8s`; not part of `make test`): etcd and kube-apiserver
// started by controller-runtime's envtest from KUBEBUILDER_ASSETS
// (hack/k8s-binaries.sh), the shipped ValidatingWebhookConfiguration
// (deploy/kubernetes) registered against an `itogate serve` child process,
// and real objects created through client-go and kubectl. Every refusal is
// asserted by the exact code in the apiserver's Forbidden error.
package k8s

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/webhook"
	"github.com/itocompute/itogate/internal/syncbuf"
)

const (
	nsA     = "team-a" // bound to scenario.Account, whose runs the test admits
	nsB     = "team-b" // bound to another account
	nsW     = "team-w" // bound to scenario.Account, in warn mode (itogate.io/enforce=warn)
	gpu     = "nvidia.com/gpu"
	fixture = "megatron-llama3-8b-h100-fp8" // 1 node × 8 H100, 6 h
)

// TestWorkloadBoundary is one end-to-end session: each case is a subtest,
// in order, on one apiserver and one itogate.
func TestWorkloadBoundary(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	env, cfg, cs := startControlPlane(t, "pytorchjob-crd.yaml")
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	// itogate, development mode, with its webhook on its own TLS port.
	caPEM, certFile, keyFile := serving(t, dir)
	it := startItogate(t, dir, certFile, keyFile)

	// The shipped webhook configuration, pointed at this itogate.
	vwc := shippedWebhook(t, it.webhookURL, caPEM)
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the webhook: %v", err)
	}
	applyAdmissionPolicies(t, cs)
	// The Job controller and a tenant, played by impersonation: envtest
	// runs no controllers, and the admin is system:masters.
	controller := impersonate(t, cfg, jobController)
	tenant := impersonate(t, cfg, tenantUser)
	for ns, mode := range map[string]string{nsA: "true", nsB: "true", nsW: "warn"} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: map[string]string{"itogate.io/enforce": mode}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	// kube-system labelled as if someone put it under control: still never blocked.
	ks, err := cs.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ks.Labels["itogate.io/enforce"] = "true"
	if _, err := cs.CoreV1().Namespaces().Update(ctx, ks, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	grantTenant(t, cs)

	runner, err := scenario.New(it.apiURL, fixtures.Manifests())
	if err != nil {
		t.Fatal(err)
	}
	admit := func(t *testing.T) scenario.Answer {
		t.Helper()
		m, err := runner.LoadManifest(fixture)
		if err != nil {
			t.Fatal(err)
		}
		a, _, err := runner.Create(ctx, m, runner.Key("k8s"))
		if err != nil || a.Status != http.StatusOK || a.Data.Ticket == "" {
			t.Fatalf("admit %s: %d %v %v", fixture, a.Status, a.Codes(), err)
		}
		return a
	}

	// The apiserver picks the configuration up asynchronously: wait until
	// a Job without a ticket is refused by it (readiness, not a time bound).
	waitForWebhook(t, cs)

	run := admit(t)
	jobs := cs.BatchV1().Jobs(nsA)

	t.Run("no ticket", func(t *testing.T) {
		_, err := jobs.Create(ctx, gpuJob("no-ticket", "", 1, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_TICKET_MISSING")
	})
	t.Run("forged ticket", func(t *testing.T) {
		_, err := jobs.Create(ctx, gpuJob("forged", forge(run.Data.Ticket), 1, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_TICKET_INVALID")
	})
	t.Run("expired ticket", func(t *testing.T) {
		_, err := jobs.Create(ctx, gpuJob("expired", expired(t, run.Data.Ticket), 1, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_TICKET_EXPIRED")
	})
	t.Run("ticket of another namespace's account", func(t *testing.T) {
		_, err := cs.BatchV1().Jobs(nsB).Create(ctx, gpuJob("elsewhere", run.Data.Ticket, 1, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_ACCOUNT_MISMATCH")
	})
	t.Run("more GPUs than admitted", func(t *testing.T) {
		_, err := jobs.Create(ctx, gpuJob("too-big", run.Data.Ticket, 2, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_GPUS_EXCEED_TICKET")
	})
	t.Run("server-side dry run binds nothing", func(t *testing.T) {
		out, err := kubectl(t, env, "apply", "-n", nsA, "--server-side", "--dry-run=server", "-f", writeJob(t, dir, gpuJob("dry", run.Data.Ticket, 1, 8)))
		if err != nil || !strings.Contains(out, "job.batch/dry serverside-applied (server dry run)") {
			t.Fatalf("kubectl dry run: %v\n%s", err, out)
		}
	})
	pods := cs.CoreV1().Pods(nsA)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	t.Run("MIG name without a ticket", func(t *testing.T) {
		_, err := pods.Create(ctx, podWith("mig", "", corev1.ResourceList{"nvidia.com/mig-1g.10gb": qty(7)}), dryRun)
		wantForbidden(t, err, "WORKLOAD_TICKET_MISSING")
	})
	t.Run("device-class extended resource", func(t *testing.T) {
		_, err := pods.Create(ctx, podWith("dra-ext", "", corev1.ResourceList{
			"deviceclass.resource.kubernetes.io/gpu.nvidia.com": qty(8)}), dryRun)
		wantForbidden(t, err, "WORKLOAD_TICKET_MISSING")
		_, err = pods.Create(ctx, podWith("dra-alias", run.Data.Ticket, corev1.ResourceList{
			"deviceclass.resource.kubernetes.io/fast-gpus": qty(8)}), dryRun)
		wantForbidden(t, err, "WORKLOAD_GPU_COUNT_UNKNOWN")
	})
	t.Run("sidecar arithmetic", func(t *testing.T) {
		// 6 for the trainer and 4 for a native sidecar run together: 10 on an 8-GPU ticket.
		p := podWith("sidecar", run.Data.Ticket, corev1.ResourceList{gpu: qty(6)})
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = []corev1.Container{{Name: "warm", Image: "warm:1", RestartPolicy: &always,
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gpu: qty(4)}}}}
		_, err := pods.Create(ctx, p, dryRun)
		wantForbidden(t, err, "WORKLOAD_GPUS_EXCEED_TICKET")
		if !strings.Contains(err.Error(), "10 GPUs requested, 8 admitted") {
			t.Fatalf("err %v, want the sidecar counted beside the trainer", err)
		}
		// An ordinary init container of 8 runs before the trainer's 6: the Pod holds 8.
		p.Spec.InitContainers[0].RestartPolicy = nil
		p.Spec.InitContainers[0].Resources.Limits[gpu] = qty(8)
		if _, err := pods.Create(ctx, p, dryRun); err != nil {
			t.Fatalf("init container of 8 before a trainer of 6: %v", err)
		}
	})
	t.Run("GPU access without a count", func(t *testing.T) {
		p := podWith("env", "", corev1.ResourceList{corev1.ResourceCPU: qty(1)})
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
		_, err := pods.Create(ctx, p, dryRun)
		wantForbidden(t, err, "WORKLOAD_GPU_ACCESS_UNCOUNTED")
		p = podWith("privileged", "", corev1.ResourceList{corev1.ResourceCPU: qty(1)})
		yes := true
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
		_, err = pods.Create(ctx, p, dryRun)
		wantForbidden(t, err, "WORKLOAD_GPU_ACCESS_UNCOUNTED")
		// Holding the whole node (8 of the ticket's 8 per node), it reaches nothing more.
		p = podWith("whole-node", run.Data.Ticket, corev1.ResourceList{gpu: qty(8)})
		p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
		if _, err := pods.Create(ctx, p, dryRun); err != nil {
			t.Fatalf("privileged on a whole node: %v", err)
		}
	})
	t.Run("DRA claim and template", func(t *testing.T) {
		templates := cs.ResourceV1().ResourceClaimTemplates(nsA)
		_, err := templates.Create(ctx, claimTemplate("all-gpus", resourcev1.ExactDeviceRequest{
			DeviceClassName: "gpu.nvidia.com", AllocationMode: resourcev1.DeviceAllocationModeAll}), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_GPU_COUNT_UNKNOWN")
		_, err = templates.Create(ctx, claimTemplate("alias", resourcev1.ExactDeviceRequest{
			DeviceClassName: "fast-gpus", Count: 8}), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_GPU_COUNT_UNKNOWN")
		_, err = cs.ResourceV1().ResourceClaims(nsA).Create(ctx, &resourcev1.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "all-gpus"},
			Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
				Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com",
					AllocationMode: resourcev1.DeviceAllocationModeAll}}}}},
		}, metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_GPU_COUNT_UNKNOWN")
		// Eight of a GPU class: a count; the template itself is charged to no ticket.
		if _, err := templates.Create(ctx, claimTemplate("eight-gpus", resourcev1.ExactDeviceRequest{
			DeviceClassName: "gpu.nvidia.com", Count: 8}), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a template of 8 GPUs: %v", err)
		}
		// A Job naming it: each Pod is charged a whole node, 2 Pods are 16 GPUs on an 8-GPU ticket.
		j := gpuJob("dra-job", run.Data.Ticket, 2, 0)
		j.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		j.Spec.Template.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr("eight-gpus")}}
		_, err = jobs.Create(ctx, j, metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_GPUS_EXCEED_TICKET")
		// A Pod naming a standalone claim: its devices cannot be seen.
		p := podWith("named-claim", run.Data.Ticket, corev1.ResourceList{gpu: qty(4)})
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr("shared-gpus")}}
		_, err = pods.Create(ctx, p, dryRun)
		wantForbidden(t, err, "WORKLOAD_GPU_COUNT_UNKNOWN")
	})
	t.Run("negative replicas of a PyTorchJob", func(t *testing.T) {
		// The apiserver checks the scale path (Worker.replicas) of the CRD,
		// not the other replica specs: 4 workers and -3 masters would total 8.
		pj := pytorchJob("negative", run.Data.Ticket, 8, 4)
		if err := unstructured.SetNestedField(pj.Object, int64(-3), "spec", "pytorchReplicaSpecs", "Master", "replicas"); err != nil {
			t.Fatal(err)
		}
		_, err := dyn.Resource(pytorchJobs).Namespace(nsA).Create(ctx, pj, metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_COUNT_INVALID")
	})
	var created *batchv1.Job
	t.Run("valid ticket: created", func(t *testing.T) {
		// After the dry run of "dry": had it bound the ticket, this
		// object (another name) would be WORKLOAD_TICKET_BOUND.
		created, err = jobs.Create(ctx, gpuJob("train", run.Data.Ticket, 1, 8), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
	})
	t.Run("second Job on the same ticket", func(t *testing.T) {
		_, err := jobs.Create(ctx, gpuJob("train-2", run.Data.Ticket, 1, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_TICKET_BOUND")
		out, err := kubectl(t, env, "apply", "-n", nsA, "--server-side", "--dry-run=server", "-f", writeJob(t, dir, gpuJob("train-3", run.Data.Ticket, 1, 8)))
		if err == nil || !strings.Contains(out, "WORKLOAD_TICKET_BOUND") {
			t.Fatalf("kubectl dry run of a second Job: %v\n%s", err, out)
		}
	})
	t.Run("ticket swap on UPDATE", func(t *testing.T) {
		if created == nil {
			t.Skip("no Job")
		}
		second := admit(t)
		j, err := jobs.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		j.Annotations[webhook.TicketAnnotation] = second.Data.Ticket
		_, err = jobs.Update(ctx, j, metav1.UpdateOptions{})
		wantForbidden(t, err, "WORKLOAD_TICKET_CHANGED")
		// The second run's ticket is still unspent: it creates its own Job.
		if _, err := jobs.Create(ctx, gpuJob("train-second", second.Data.Ticket, 1, 8), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the second ticket after the refused swap: %v", err)
		}
	})
	t.Run("ephemeral container", func(t *testing.T) {
		p, err := pods.Create(ctx, podWith("debuggee", "", corev1.ResourceList{corev1.ResourceCPU: qty(1)}), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		debug := corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "busybox:1", Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}}}
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{debug}
		_, err = pods.UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
		wantForbidden(t, err, "WORKLOAD_GPU_ACCESS_UNCOUNTED")
		p.Spec.EphemeralContainers[0].Env = nil
		if _, err := pods.UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("a plain debug container: %v", err)
		}
	})
	t.Run("pods/resize cannot reach a GPU", func(t *testing.T) {
		// Not sent to itogate: the apiserver lets a resize change only CPU and memory.
		p, err := pods.Get(ctx, "debuggee", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: qty(1), gpu: qty(8)}
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: qty(1), gpu: qty(8)}
		_, err = pods.UpdateResize(ctx, p.Name, p, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "only cpu and memory resources are mutable") {
			t.Fatalf("resize to 8 GPUs: %v, want the apiserver's Invalid", err)
		}
	})
	t.Run("scale subresource of a PyTorchJob", func(t *testing.T) {
		// A PyTorchJob without GPUs needs no ticket; its scale review carries only the replicas.
		if _, err := dyn.Resource(pytorchJobs).Namespace(nsA).Create(ctx, pytorchJob("elastic", "", 0, 2), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := dyn.Resource(pytorchJobs).Namespace(nsA).Patch(ctx, "elastic", types.MergePatchType,
			[]byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{}, "scale")
		wantForbidden(t, err, "WORKLOAD_SCALE_UNCOUNTED")
		if _, err := dyn.Resource(pytorchJobs).Namespace(nsA).Patch(ctx, "elastic", types.MergePatchType,
			[]byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{}, "scale"); err != nil {
			t.Fatalf("scale down: %v", err)
		}
	})
	t.Run("the Job's Pods, and only its Pods", func(t *testing.T) {
		if created == nil {
			t.Skip("no Job")
		}
		// envtest runs no controllers: the Job controller's identity creates the Pod it would.
		_, err := controller.CoreV1().Pods(nsA).Create(ctx, gpuPod("train-0", run.Data.Ticket, created.UID, 8), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the Job's Pod: %v", err)
		}
		// A Pod the controller re-creates after the ticket (minutes long)
		// expired: the Pod template still carries it; the run is live.
		_, err = controller.CoreV1().Pods(nsA).Create(ctx, gpuPod("train-0-replaced", expired(t, run.Data.Ticket), created.UID, 8),
			metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the Job's Pod re-created after the ticket expired: %v", err)
		}
		_, err = controller.CoreV1().Pods(nsA).Create(ctx, gpuPod("rogue", run.Data.Ticket, "00000000-0000-4000-8000-000000000000", 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_OWNER_UNBOUND")
	})
	t.Run("relabel of a ticketed Pod", func(t *testing.T) {
		if created == nil {
			t.Skip("no Job")
		}
		// A relabelled or released Pod of a Job is replaced by the Job
		// controller while it keeps its GPUs: not the tenant's to do.
		patch := func(c *kubernetes.Clientset, body string, dry bool) error {
			opts := metav1.PatchOptions{}
			if dry {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			_, err := c.CoreV1().Pods(nsA).Patch(ctx, "train-0", types.MergePatchType, []byte(body), opts)
			return err
		}
		const relabel = `{"metadata":{"labels":{"batch.kubernetes.io/job-name":"released"}}}`
		eventually(t, func() error { return patch(tenant, relabel, true) }, "itogate-ticketed-pods", "WORKLOAD_POD_METADATA_GUARDED")
		err := patch(tenant, relabel, false)
		wantPolicyDenied(t, err, "itogate-ticketed-pods", "WORKLOAD_POD_METADATA_GUARDED")
		if !strings.HasSuffix(err.Error(), "may change its labels") {
			t.Fatalf("err %v, want the labels named", err)
		}
		err = patch(tenant, `{"metadata":{"ownerReferences":null}}`, false)
		wantPolicyDenied(t, err, "itogate-ticketed-pods", "WORKLOAD_POD_METADATA_GUARDED")
		err = patch(tenant, `{"metadata":{"annotations":{"itogate.io/ticket":null}}}`, false)
		wantPolicyDenied(t, err, "itogate-ticketed-pods", "WORKLOAD_POD_METADATA_GUARDED")
		// Whoever holds pods/status (a role granting pods/*, say) could
		// relabel through it: a status write keeps the stored spec and
		// ownerReferences but takes new labels and annotations.
		grantStatus(t, cs, "", "pods")
		status := func(body string, dry bool) error {
			opts := metav1.PatchOptions{}
			if dry {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			_, err := tenant.CoreV1().Pods(nsA).Patch(ctx, "train-0", types.MergePatchType, []byte(body), opts, "status")
			return err
		}
		eventually(t, func() error { return status(relabel, true) }, "itogate-ticketed-pods", "WORKLOAD_POD_METADATA_GUARDED")
		wantPolicyDenied(t, status(relabel, false), "itogate-ticketed-pods", "WORKLOAD_POD_METADATA_GUARDED")
		wantPolicyDenied(t, status(`{"metadata":{"annotations":{"itogate.io/ticket":null}}}`, false),
			"itogate-ticketed-pods", "WORKLOAD_POD_METADATA_GUARDED")
		// Her own annotation passes; the Job controller may release the
		// Pod and an admin may relabel it (dry runs: the Pod stays as it is).
		if err := patch(tenant, `{"metadata":{"annotations":{"note":"slow node"}}}`, false); err != nil {
			t.Fatalf("an ordinary annotation: %v", err)
		}
		if err := patch(controller, `{"metadata":{"ownerReferences":null}}`, true); err != nil {
			t.Fatalf("the Job controller releases its Pod: %v", err)
		}
		if err := patch(cs, relabel, true); err != nil {
			t.Fatalf("the admin relabels: %v", err)
		}
		p, err := pods.Get(ctx, "train-0", metav1.GetOptions{})
		if err != nil || len(p.OwnerReferences) != 1 || p.Labels["batch.kubernetes.io/job-name"] == "released" ||
			p.Annotations[webhook.TicketAnnotation] == "" {
			t.Fatalf("the Pod changed: %v %v %v", p.OwnerReferences, p.Labels, err)
		}
	})
	t.Run("long-grace delete of a ticketed Pod", func(t *testing.T) {
		if created == nil {
			t.Skip("no Job")
		}
		// A deleted Pod keeps its GPUs for its grace period while the Job
		// controller replaces it: a tenant may not ask for longer than the
		// bundle's bound, by DELETE or by eviction (dry runs: the Pod
		// stays). The apiserver deletes a Pod on no node at once, whatever
		// was asked, so this Pod is bound to a node.
		onNode := gpuPod("train-1", run.Data.Ticket, created.UID, 8)
		onNode.Spec.NodeName = "gpu-node-0"
		if _, err := controller.CoreV1().Pods(nsA).Create(ctx, onNode, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the Job's Pod on a node: %v", err)
		}
		t.Cleanup(func() {
			now := int64(0)
			_ = cs.CoreV1().Pods(nsA).Delete(context.Background(), "train-1", metav1.DeleteOptions{GracePeriodSeconds: &now})
		})
		day, bound := int64(86400), int64(600)
		dry := []string{metav1.DryRunAll}
		del := func(grace *int64) error {
			return tenant.CoreV1().Pods(nsA).Delete(ctx, "train-1", metav1.DeleteOptions{GracePeriodSeconds: grace, DryRun: dry})
		}
		evict := func(grace *int64) error {
			return tenant.PolicyV1().Evictions(nsA).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "train-1", Namespace: nsA},
				DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: grace, DryRun: dry}})
		}
		eventually(t, func() error { return del(&day) }, "itogate-pod-deletion", "WORKLOAD_DELETE_GRACE_TOO_LONG")
		wantPolicyDenied(t, del(&day), "itogate-pod-deletion", "WORKLOAD_DELETE_GRACE_TOO_LONG")
		wantPolicyDenied(t, evict(&day), "itogate-pod-deletion", "WORKLOAD_DELETE_GRACE_TOO_LONG")
		for what, try := range map[string]func() error{
			"a delete within the bound":    func() error { return del(&bound) },
			"a delete at the Pod's own":    func() error { return del(nil) },
			"an eviction within the bound": func() error { return evict(&bound) },
			"an eviction at the Pod's own": func() error { return evict(nil) },
		} {
			if err := try(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		if p, err := pods.Get(ctx, "train-1", metav1.GetOptions{}); err != nil || p.DeletionTimestamp != nil {
			t.Fatalf("the Pod changed after dry runs: %v %v", p, err)
		}
	})
	t.Run("device annotation added to a running Pod", func(t *testing.T) {
		// The kubelet and NRI plugins read a Pod's annotations again when
		// its sandbox is re-created: a tenant adds no device-injecting one
		// to a running Pod, ticketed or not. A cluster admin passes the
		// apiserver's policy, and the webhook judges the change.
		if _, err := pods.Create(ctx, podWith("annotated", "", corev1.ResourceList{corev1.ResourceCPU: qty(1)}),
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		patch := func(c *kubernetes.Clientset, name, body string, dry bool) error {
			opts := metav1.PatchOptions{}
			if dry {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			_, err := c.CoreV1().Pods(nsA).Patch(ctx, name, types.MergePatchType, []byte(body), opts)
			return err
		}
		annotate := func(key, value string) string {
			return fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
		}
		const policy, code = "itogate-pod-device-annotations", "WORKLOAD_DEVICE_ANNOTATION_GUARDED"
		cdi := annotate("nvidia.cdi.k8s.io/container.trainer", "nvidia.com/gpu=all")
		eventually(t, func() error { return patch(tenant, "annotated", cdi, true) }, policy, code)
		err := patch(tenant, "annotated", cdi, false)
		wantPolicyDenied(t, err, policy, code)
		if !strings.Contains(err.Error(), "device-injecting annotation nvidia.cdi.k8s.io/container.trainer") {
			t.Fatalf("err %v, want the annotation named", err)
		}
		for _, key := range []string{"devices.noderesource.dev/pod", "cdi.k8s.io/x", "io.kubernetes.cri-o.Devices"} {
			wantPolicyDenied(t, patch(tenant, "annotated", annotate(key, "nvidia.com/gpu=all"), false), policy, code)
		}
		// Nor through pods/status, which takes new annotations too.
		grantStatus(t, cs, "", "pods")
		eventually(t, func() error {
			_, err := tenant.CoreV1().Pods(nsA).Patch(ctx, "annotated", types.MergePatchType, []byte(cdi),
				metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
			return err
		}, policy, code)
		_, err = tenant.CoreV1().Pods(nsA).Patch(ctx, "annotated", types.MergePatchType, []byte(cdi), metav1.PatchOptions{}, "status")
		wantPolicyDenied(t, err, policy, code)
		if created != nil {
			wantPolicyDenied(t, patch(tenant, "train-0", cdi, false), policy, code)
		}
		if err := patch(tenant, "annotated", annotate("note", "slow node"), false); err != nil {
			t.Fatalf("an ordinary annotation: %v", err)
		}
		// The admin's (a dry run): not a teardown for the webhook, which
		// refuses a device annotation on a Pod holding no whole node.
		wantForbidden(t, patch(cs, "annotated", cdi, true), "WORKLOAD_GPU_ACCESS_UNCOUNTED")
		p, err := pods.Get(ctx, "annotated", metav1.GetOptions{})
		if err != nil || p.Annotations["note"] != "slow node" || p.Annotations["nvidia.cdi.k8s.io/container.trainer"] != "" ||
			p.Annotations["cdi.k8s.io/x"] != "" {
			t.Fatalf("the Pod's annotations: %v %v", p.Annotations, err)
		}
	})
	t.Run("tenant-made child Job and Pod", func(t *testing.T) {
		if created == nil {
			t.Skip("no Job")
		}
		// The bound Job's uid is readable with get; naming it as owner is not the tenant's to do.
		_, err := tenant.CoreV1().Pods(nsA).Create(ctx, gpuPod("borrowed", run.Data.Ticket, created.UID, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_CHILD_CREATOR_UNTRUSTED")
		j := gpuJob("borrowed-job", run.Data.Ticket, 1, 8)
		yes := true
		j.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: created.Name, UID: created.UID, Controller: &yes}}
		_, err = tenant.BatchV1().Jobs(nsA).Create(ctx, j, metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_CHILD_CREATOR_UNTRUSTED")
	})
	t.Run("bare Pod with a bound ticket", func(t *testing.T) {
		_, err := tenant.CoreV1().Pods(nsA).Create(ctx, gpuPod("bare", run.Data.Ticket, "", 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_TICKET_BOUND")
	})
	t.Run("orphaning delete and re-create", func(t *testing.T) {
		own := admit(t)
		first, err := tenant.BatchV1().Jobs(nsA).Create(ctx, gpuJob("redo", own.Data.Ticket, 1, 8), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := controller.CoreV1().Pods(nsA).Create(ctx, gpuPod("redo-0", own.Data.Ticket, first.UID, 8), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the first Job's Pod: %v", err)
		}
		orphan := metav1.DeletePropagationOrphan
		eventually(t, func() error {
			return tenant.BatchV1().Jobs(nsA).Delete(ctx, "redo", metav1.DeleteOptions{PropagationPolicy: &orphan, DryRun: []string{metav1.DryRunAll}})
		}, "itogate-workload-delete", "WORKLOAD_ORPHANING_DELETE")
		err = tenant.BatchV1().Jobs(nsA).Delete(ctx, "redo", metav1.DeleteOptions{PropagationPolicy: &orphan})
		wantPolicyDenied(t, err, "itogate-workload-delete", "WORKLOAD_ORPHANING_DELETE")
		// No policy given: the apiserver orphans a batch/v1 Job's Pods by default.
		err = tenant.BatchV1().Jobs(nsA).Delete(ctx, "redo", metav1.DeleteOptions{})
		wantPolicyDenied(t, err, "itogate-workload-delete", "WORKLOAD_ORPHANING_DELETE")
		yes := true
		err = tenant.BatchV1().Jobs(nsA).Delete(ctx, "redo", metav1.DeleteOptions{OrphanDependents: &yes})
		wantPolicyDenied(t, err, "itogate-workload-delete", "WORKLOAD_ORPHANING_DELETE")
		_, err = tenant.BatchV1().Jobs(nsA).Patch(ctx, "redo", types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":["orphan"]}}`), metav1.PatchOptions{})
		wantPolicyDenied(t, err, "itogate-workload-delete", "WORKLOAD_ORPHANING_DELETE")
		// jobs/status takes new metadata: whoever holds it (a role granting
		// jobs/*) cannot strip the ticket there and then orphan the Pods.
		grantStatus(t, cs, "batch", "jobs")
		strip := func(dry bool) error {
			opts := metav1.PatchOptions{}
			if dry {
				opts.DryRun = []string{metav1.DryRunAll}
			}
			_, err := tenant.BatchV1().Jobs(nsA).Patch(ctx, "redo", types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"itogate.io/ticket":null}}}`), opts, "status")
			return err
		}
		eventually(t, func() error { return strip(true) }, "itogate-workload-delete", "WORKLOAD_ORPHANING_DELETE")
		err = strip(false)
		wantPolicyDenied(t, err, "itogate-workload-delete", "WORKLOAD_ORPHANING_DELETE")
		if !strings.Contains(err.Error(), "a status write may not change or remove its itogate.io/ticket annotation") {
			t.Fatalf("err %v, want the status write named", err)
		}
		if j, err := tenant.BatchV1().Jobs(nsA).Get(ctx, "redo", metav1.GetOptions{}); err != nil ||
			j.Annotations[webhook.TicketAnnotation] != own.Data.Ticket {
			t.Fatalf("the Job's ticket after a refused status write: %v %v", j.Annotations, err)
		}
		// A custom resource created with the orphan finalizer would be
		// orphaned by a DELETE with empty options: refused at CREATE.
		pj := pytorchJob("born-orphaning", own.Data.Ticket, 8, 1)
		pj.SetFinalizers([]string{"orphan"})
		_, err = dyn.Resource(pytorchJobs).Namespace(nsA).Create(ctx, pj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		wantPolicyDenied(t, err, "itogate-workload-delete", "WORKLOAD_ORPHANING_DELETE")
		if !strings.Contains(err.Error(), "the orphan finalizer would orphan its dependents") {
			t.Fatalf("err %v, want the finalizer named", err)
		}
		if _, err := tenant.BatchV1().Jobs(nsA).Get(ctx, "redo", metav1.GetOptions{}); err != nil {
			t.Fatalf("the Job after refused orphaning deletes: %v", err)
		}
		// kubectl's default: the Pods go with the Job. Then the same name again, same ticket.
		background := metav1.DeletePropagationBackground
		if err := tenant.BatchV1().Jobs(nsA).Delete(ctx, "redo", metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
			t.Fatalf("background delete: %v", err)
		}
		second, err := tenant.BatchV1().Jobs(nsA).Create(ctx, gpuJob("redo", own.Data.Ticket, 1, 8), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("re-create under the same name: %v", err)
		}
		if _, err := controller.CoreV1().Pods(nsA).Create(ctx, gpuPod("redo-1", own.Data.Ticket, second.UID, 8), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the re-created Job's Pod: %v", err)
		}
		// The deleted object's uid admits no more children, even from its controller.
		_, err = controller.CoreV1().Pods(nsA).Create(ctx, gpuPod("redo-2", own.Data.Ticket, first.UID, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_OWNER_RETIRED")
	})
	t.Run("generateName create retried after a lost answer", func(t *testing.T) {
		own := admit(t)
		// The apiserver's call for gen-lost01 reached itogate, which bound
		// the run; its answer came after the apiserver's timeout, so the
		// object was never stored. The client retries: a new name.
		lost := gpuJob("gen-lost01", own.Data.Ticket, 1, 8)
		lost.GenerateName, lost.Namespace, lost.UID = "gen-", nsA, "11111111-0000-4000-8000-000000000001"
		if resp := sendReview(t, it.webhookURL, caPEM, lost); !resp.Allowed {
			t.Fatalf("the lost create: %+v", resp.Result)
		}
		retry := gpuJob("", own.Data.Ticket, 1, 8)
		retry.GenerateName = "gen-"
		got, err := tenant.BatchV1().Jobs(nsA).Create(ctx, retry, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the retried create: %v", err)
		}
		if _, err := controller.CoreV1().Pods(nsA).Create(ctx, gpuPod(got.Name+"-0", own.Data.Ticket, got.UID, 8), metav1.CreateOptions{}); err != nil {
			t.Fatalf("the retried Job's Pod: %v", err)
		}
		// A second live object of the prefix gets no Pods: the first with a Pod runs.
		other, err := tenant.BatchV1().Jobs(nsA).Create(ctx, retry, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a second object of the prefix: %v", err)
		}
		_, err = controller.CoreV1().Pods(nsA).Create(ctx, gpuPod(other.Name+"-0", own.Data.Ticket, other.UID, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_TICKET_BOUND")
	})
	t.Run("namespace relabel by a tenant", func(t *testing.T) {
		relabelOpts := func(c *kubernetes.Clientset, key string, value any, opts metav1.PatchOptions) error {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{key: value}}})
			_, err := c.CoreV1().Namespaces().Patch(ctx, nsA, types.MergePatchType, patch, opts)
			return err
		}
		relabel := func(c *kubernetes.Clientset, key string, value any) error {
			return relabelOpts(c, key, value, metav1.PatchOptions{})
		}
		// Until the apiserver has loaded the policy, probe with dry runs: nothing changes.
		eventually(t, func() error {
			return relabelOpts(tenant, "itogate.io/enforce", "false", metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		}, "itogate-namespace-labels", "NAMESPACE_LABEL_GUARDED")
		for key, value := range map[string]any{
			"itogate.io/enforce":                  nil, // removed
			"itogate.io/api-client":               "true",
			"resource.kubernetes.io/admin-access": "true",
			"pod-security.kubernetes.io/enforce":  "privileged",
			"itogate.io/enforcement-mode":         "warn",
		} {
			wantPolicyDenied(t, relabel(tenant, key, value), "itogate-namespace-labels", "NAMESPACE_LABEL_GUARDED")
		}
		// The tenant's own labels stay hers; a cluster admin may change a guarded one.
		if err := relabel(tenant, "team", "vision"); err != nil {
			t.Fatalf("an ordinary label: %v", err)
		}
		if err := relabel(cs, "itogate.io/api-client", "true"); err != nil {
			t.Fatalf("the admin: %v", err)
		}
		if err := relabel(cs, "itogate.io/api-client", nil); err != nil {
			t.Fatalf("the admin: %v", err)
		}
		ns, err := cs.CoreV1().Namespaces().Get(ctx, nsA, metav1.GetOptions{})
		if err != nil || ns.Labels["itogate.io/enforce"] != "true" || ns.Labels["team"] != "vision" {
			t.Fatalf("namespace labels %v %v", ns.Labels, err)
		}
	})
	t.Run("GPU toleration outside controlled namespaces", func(t *testing.T) {
		// team-z: nobody labelled it; kube-x: named like a system namespace by
		// whoever may create one; gpu-agents: a cluster admin exempted it.
		for ns, labels := range map[string]map[string]string{"team-z": nil, "kube-x": nil,
			"gpu-agents": {"itogate.io/enforce": "exempt"}} {
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}},
				metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		tolerating := func(name string, ts ...corev1.Toleration) *corev1.Pod {
			p := podWith(name, "", corev1.ResourceList{gpu: qty(8)})
			p.Spec.Tolerations = ts
			return p
		}
		gpuTaint := corev1.Toleration{Key: gpu, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
		everything := corev1.Toleration{Operator: corev1.TolerationOpExists}
		eventually(t, func() error {
			_, err := cs.CoreV1().Pods("team-z").Create(ctx, tolerating("probe", gpuTaint), dryRun)
			return err
		}, "itogate-gpu-tolerations", "WORKLOAD_GPU_TOLERATION_UNCONTROLLED")
		_, err := cs.CoreV1().Pods("team-z").Create(ctx, tolerating("gpu", gpuTaint), metav1.CreateOptions{})
		wantPolicyDenied(t, err, "itogate-gpu-tolerations", "WORKLOAD_GPU_TOLERATION_UNCONTROLLED")
		if !strings.Contains(err.Error(), "pods/gpu tolerates the GPU taint nvidia.com/gpu in namespace team-z") {
			t.Fatalf("err %v, want the toleration named", err)
		}
		// Only kube-system, kube-public and kube-node-lease are exempt by name:
		// a kube-* prefix is not.
		_, err = cs.CoreV1().Pods("kube-x").Create(ctx, tolerating("gpu", gpuTaint), metav1.CreateOptions{})
		wantPolicyDenied(t, err, "itogate-gpu-tolerations", "WORKLOAD_GPU_TOLERATION_UNCONTROLLED")
		d := gpuJob("tolerant", "", 1, 8)
		d.Spec.Template.Spec.Tolerations = []corev1.Toleration{everything}
		_, err = cs.BatchV1().Jobs("team-z").Create(ctx, d, metav1.CreateOptions{})
		wantPolicyDenied(t, err, "itogate-gpu-tolerations", "WORKLOAD_GPU_TOLERATION_UNCONTROLLED")
		// Without the toleration the taint keeps it off GPU nodes: admitted.
		if _, err := cs.CoreV1().Pods("team-z").Create(ctx, tolerating("plain"), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a Pod without the toleration: %v", err)
		}
		// An UPDATE adding it is refused too (tolerations may be added to a Pod).
		p, err := cs.CoreV1().Pods("team-z").Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.Tolerations = append(p.Spec.Tolerations, gpuTaint)
		_, err = cs.CoreV1().Pods("team-z").Update(ctx, p, metav1.UpdateOptions{})
		wantPolicyDenied(t, err, "itogate-gpu-tolerations", "WORKLOAD_GPU_TOLERATION_UNCONTROLLED")
		// An exempt namespace's agents and a controlled namespace's Pods keep theirs.
		if _, err := cs.CoreV1().Pods("gpu-agents").Create(ctx, tolerating("agent", everything), dryRun); err != nil {
			t.Fatalf("a Pod tolerating everything in an exempt namespace: %v", err)
		}
		cpu := podWith("cpu-tolerant", "", corev1.ResourceList{corev1.ResourceCPU: qty(1)})
		cpu.Spec.Tolerations = []corev1.Toleration{gpuTaint}
		if _, err := pods.Create(ctx, cpu, dryRun); err != nil {
			t.Fatalf("a Pod tolerating the taint in a controlled namespace: %v", err)
		}
		// Exempting is a cluster admin's: the tenant cannot exempt her namespace.
		_, err = tenant.CoreV1().Namespaces().Patch(ctx, nsA, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"itogate.io/enforce":"exempt"}}}`), metav1.PatchOptions{})
		wantPolicyDenied(t, err, "itogate-namespace-labels", "NAMESPACE_LABEL_GUARDED")
	})
	t.Run("cancelled run: no new Pods", func(t *testing.T) {
		if created == nil {
			t.Skip("no Job")
		}
		cancelRun(t, ctx, runner, run.Data.RunID)
		_, err := controller.CoreV1().Pods(nsA).Create(ctx, gpuPod("train-1", run.Data.Ticket, created.UID, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_RUN_NOT_LIVE")
		_, err = controller.CoreV1().Pods(nsA).Create(ctx, gpuPod("train-1-replaced", expired(t, run.Data.Ticket), created.UID, 8),
			metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_RUN_NOT_LIVE")
	})
	// bindJob creates a Job of one 8-GPU Pod with tk, which binds its run.
	bindJob := func(t *testing.T, name, tk string) *batchv1.Job {
		t.Helper()
		j, err := jobs.Create(ctx, gpuJob(name, tk, 1, 8), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the run's Job: %v", err)
		}
		return j
	}
	t.Run("revoked booking: no new Pods", func(t *testing.T) {
		const booking = "bk_k8s_revoked"
		m, err := runner.LoadManifest(fixture)
		if err != nil {
			t.Fatal(err)
		}
		ent, err := runner.EntitlementForRuns(m, booking, 1)
		if err != nil {
			t.Fatal(err)
		}
		budget, _ := m.Doc["budget"].(map[string]any)
		cost, _ := budget["ceiling_usd"].(string)
		ref, err := runner.ConfirmWith(ctx, "train.create", manifest.Digest(m.Raw), cost, "",
			func(c map[string]any) { c["booking_id"] = booking })
		if err != nil {
			t.Fatal(err)
		}
		a, err := runner.Admit(ctx, api.AdmissionRequest{Action: "train.create", BookingID: booking,
			IdempotencyKey: runner.Key("k8s-revoked"), Manifest: m.Raw, ManifestSignature: m.Signature,
			EntitlementToken: ent, ConfirmationRef: ref})
		if err != nil || a.Status != http.StatusOK {
			t.Fatalf("admit on %s: %d %v %v", booking, a.Status, a.Codes(), err)
		}
		j := bindJob(t, "revoked-run", a.Data.Ticket)
		rev, err := runner.RevokerToken()
		if err != nil {
			t.Fatal(err)
		}
		status, text, err := runner.Post(ctx, "/v1/revocations", rev, map[string]any{"kind": "booking", "subject": booking,
			"expires_at": time.Now().Add(24 * time.Hour).Unix(), "reason": "term breach"})
		if err != nil || status != http.StatusCreated {
			t.Fatalf("revoke %s: %d %s %v", booking, status, text, err)
		}
		_, err = controller.CoreV1().Pods(nsA).Create(ctx, gpuPod("revoked-run-0", a.Data.Ticket, j.UID, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "ENTITLEMENT_REVOKED")
		if !strings.Contains(err.Error(), "booking "+booking+" revoked") {
			t.Fatalf("the refusal does not name the revocation: %v", err)
		}
	})
	t.Run("halted run (EVAL_FAILED): no new Pods", func(t *testing.T) {
		m, err := runner.Curriculum()
		if err != nil {
			t.Fatal(err)
		}
		a, _, err := runner.Create(ctx, m, runner.Key("k8s-halt"))
		if err != nil || a.Status != http.StatusOK {
			t.Fatalf("admit the curriculum run: %d %v %v", a.Status, a.Codes(), err)
		}
		j := bindJob(t, "halted-run", a.Data.Ticket)
		report, err := runner.EvalReport(a.Data.RunID, "pretrain", manifest.Digest(m.Raw), "ito-battery-pretrain-2026.10",
			map[string]float64{"mmlu_5shot": 0.01, "hellaswag_acc": 0.42})
		if err != nil {
			t.Fatal(err)
		}
		req, err := runner.AdvanceRequest(ctx, m, a.Data.RunID, "long_context", report)
		if err != nil {
			t.Fatal(err)
		}
		adv, err := runner.Admit(ctx, req)
		if err != nil || adv.Status != http.StatusForbidden || !strings.Contains(strings.Join(adv.Codes(), ","), "EVAL_FAILED") {
			t.Fatalf("the failing advance: %d %v %v", adv.Status, adv.Codes(), err)
		}
		_, err = controller.CoreV1().Pods(nsA).Create(ctx, gpuPod("halted-run-0", a.Data.Ticket, j.UID, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_RUN_HALTED")
		if !strings.Contains(err.Error(), "mmlu_5shot") {
			t.Fatalf("the refusal does not name the failed eval: %v", err)
		}
		// Cancel works on a halted run, and gives its GPUs back.
		cancelRun(t, ctx, runner, a.Data.RunID)
	})
	t.Run("teardown after cancel", func(t *testing.T) {
		if created == nil {
			t.Skip("no Job")
		}
		// The run is cancelled: its Job takes a finalizer, a label and a
		// suspend (changes of nothing that runs), is deleted, and goes
		// once its finalizer is removed.
		j, err := jobs.Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		j.Finalizers = append(j.Finalizers, "itogate.io/test-cleanup")
		j.Labels["phase"] = "cancelled"
		j.Spec.Suspend = ptr(true)
		if j, err = jobs.Update(ctx, j, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("finalizer, label and suspend on the cancelled run's Job: %v", err)
		}
		if err := jobs.Delete(ctx, j.Name, metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatal(err)
		}
		if j, err = jobs.Get(ctx, j.Name, metav1.GetOptions{}); err != nil || j.DeletionTimestamp == nil {
			t.Fatalf("the Job is not terminating: %v", err)
		}
		j.Finalizers = nil
		if _, err := jobs.Update(ctx, j, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("finalizer removal after cancel: %v", err)
		}
		if _, err := jobs.Get(ctx, j.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the Job is still there: %v", err)
		}
		// A PyTorchJob's suspend is nested (runPolicy.suspend): the
		// webhook is called, and allows it after the run's cancel.
		pjRun := admit(t)
		pj, err := dyn.Resource(pytorchJobs).Namespace(nsA).Create(ctx, pytorchJob("to-suspend", pjRun.Data.Ticket, 8, 0), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cancelRun(t, ctx, runner, pjRun.Data.RunID)
		if err := unstructured.SetNestedField(pj.Object, true, "spec", "runPolicy", "suspend"); err != nil {
			t.Fatal(err)
		}
		if pj, err = dyn.Resource(pytorchJobs).Namespace(nsA).Update(ctx, pj, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("runPolicy.suspend after cancel: %v", err)
		}
		if err := unstructured.SetNestedField(pj.Object, "All", "spec", "runPolicy", "cleanPodPolicy"); err != nil {
			t.Fatal(err)
		}
		_, err = dyn.Resource(pytorchJobs).Namespace(nsA).Update(ctx, pj, metav1.UpdateOptions{})
		wantForbidden(t, err, "WORKLOAD_RUN_NOT_LIVE")
	})
	t.Run("warn mode", func(t *testing.T) {
		// team-w is labelled itogate.io/enforce=warn: what enforcement
		// refuses is created, with the refusal as an apiserver warning,
		// and counted warned.
		wcfg := rest.CopyConfig(cfg)
		warnings := &warningLog{}
		wcfg.WarningHandler = warnings
		wcs, err := kubernetes.NewForConfig(wcfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := wcs.CoreV1().Pods(nsW).Create(ctx, gpuPod("warned", "", "", 8), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a GPU Pod without a ticket in warn mode: %v", err)
		}
		want := webhook.WarnPrefix + "WORKLOAD_TICKET_MISSING: 8 GPUs requested without an admission ticket (annotation itogate.io/ticket)"
		if got := warnings.all(); !slices.Contains(got, want) {
			t.Fatalf("warnings %q, want %q", got, want)
		}
		if m := metrics(t, it.apiURL); !strings.Contains(m, `itogate_webhook_reviews_total{code="WORKLOAD_TICKET_MISSING",result="warned"} 1`+"\n") {
			t.Fatalf("no warned review counted:\n%s", m)
		}
	})
	t.Run("a system namespace is never blocked", func(t *testing.T) {
		_, err := cs.CoreV1().Pods("kube-system").Create(ctx, gpuPod("system-gpu", "", "", 8), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("kube-system: %v", err)
		}
	})
	t.Run("itogate stopped: GPU workloads refused, the rest goes on", func(t *testing.T) {
		fresh := admit(t)
		it.stop(t)
		_, err := jobs.Create(ctx, gpuJob("while-down", fresh.Data.Ticket, 1, 8), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), `failed calling webhook "workloads.itogate.io"`) {
			t.Fatalf("with itogate down: %v, want the webhook call to fail and the apiserver to refuse", err)
		}
		if _, err := jobs.Get(ctx, "while-down", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the Job exists: %v", err)
		}
		_, err = pods.Create(ctx, gpuPod("gpu-while-down", "", "", 8), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), `failed calling webhook "workloads.itogate.io"`) {
			t.Fatalf("a GPU Pod with itogate down: %v, want refused", err)
		}
		// Without GPUs nothing is sent (matchConditions): a CPU Pod and a
		// CPU Job are created, a bound Job's label changes.
		if _, err := pods.Create(ctx, podWith("cpu-while-down", "", corev1.ResourceList{corev1.ResourceCPU: qty(2)}), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a CPU Pod with itogate down: %v", err)
		}
		cpuJob := gpuJob("cpu-job-while-down", "", 1, 0)
		cpuJob.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: qty(1)}}
		if _, err := jobs.Create(ctx, cpuJob, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a CPU Job with itogate down: %v", err)
		}
		if j, err := jobs.Get(ctx, "train-second", metav1.GetOptions{}); err == nil {
			j.Labels["while-down"] = "yes"
			if _, err := jobs.Update(ctx, j, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("a label on a bound Job with itogate down: %v", err)
			}
		} else {
			t.Fatalf("train-second: %v", err)
		}
		// Warn mode never refuses (failurePolicy: Ignore).
		if _, err := cs.CoreV1().Pods(nsW).Create(ctx, gpuPod("warn-while-down", "", "", 8), metav1.CreateOptions{}); err != nil {
			t.Fatalf("a GPU Pod in warn mode with itogate down: %v", err)
		}
		_, err = cs.CoreV1().Pods("kube-system").Create(ctx, gpuPod("system-gpu-2", "", "", 8), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("kube-system with itogate down: %v", err)
		}
	})
	t.Run("the kustomize overlays build", func(t *testing.T) {
		for _, o := range []string{"cert-manager", "ca-bundle"} {
			out, err := kubectl(t, env, "kustomize", filepath.Join("..", "..", "deploy", "kubernetes", "overlays", o))
			if err != nil || !strings.Contains(out, "kind: ValidatingWebhookConfiguration") {
				t.Fatalf("kubectl kustomize %s: %v\n%s", o, err, out)
			}
		}
	})
}

// startControlPlane starts etcd and kube-apiserver (envtest, from
// KUBEBUILDER_ASSETS) with the CRDs of the named files of testdata/, stopped
// at the test's end, and returns the admin's (system:masters) config and
// client.
func startControlPlane(t *testing.T, crds ...string) (*envtest.Environment, *rest.Config, *kubernetes.Clientset) {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test-k8s` (it builds the binaries with hack/k8s-binaries.sh)")
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ErrorIfCRDPathMissing: true}
	for _, f := range crds {
		env.CRDDirectoryPaths = append(env.CRDDirectoryPaths, filepath.Join("testdata", f))
	}
	// kube-apiserver on loopback cannot reconcile the kubernetes Service's
	// endpoints to 127.0.0.1: no reconciler.
	env.ControlPlane.GetAPIServer().Configure().Set("endpoint-reconciler-type", "none")
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start etcd and kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop the control plane: %v", err)
		}
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := cs.Discovery().ServerVersion(); err != nil || !strings.HasPrefix(v.GitVersion, "v1.") {
		t.Fatalf("server version %v %v: the binaries must report a real version", v, err)
	}
	return env, cfg, cs
}

// wantForbidden: the apiserver refused with 403 and the webhook's message,
// which starts with code.
func wantForbidden(t *testing.T, err error, code string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("err %v, want Forbidden %s", err, code)
	}
	want := `admission webhook "workloads.itogate.io" denied the request: ` + code + ": "
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("err %q, want it to contain %q", err, want)
	}
}

// wantPolicyDenied: the apiserver's ValidatingAdmissionPolicy refused
// with 403 and a message that starts with code.
func wantPolicyDenied(t *testing.T, err error, policy, code string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("err %v, want Forbidden %s", err, code)
	}
	want := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s: ", policy, policy, code)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("err %q, want it to contain %q", err, want)
	}
}

// eventually calls try until the policy refuses it with code: the
// apiserver loads a new ValidatingAdmissionPolicy asynchronously
// (readiness, not a time bound: the wait ends at the test's context).
func eventually(t *testing.T, try func() error, policy, code string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		err := try()
		if err != nil && strings.Contains(err.Error(), code) {
			wantPolicyDenied(t, err, policy, code)
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("policy %s never refused: last answer %v", policy, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

const (
	// jobController is the Job controller's identity, listed in the
	// bundle's data.ito.config.workload.controllers.
	jobController = "system:serviceaccount:kube-system:job-controller"
	// tenantUser holds the stock edit role in nsA and may patch nsA itself.
	tenantUser = "alice"
)

// impersonate is a client acting as user in groups (the test's admin may
// impersonate).
func impersonate(t *testing.T, cfg *rest.Config, user string, groups ...string) *kubernetes.Clientset {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// grantTenant gives tenantUser the stock edit role in nsA and the right to
// patch namespace nsA itself (as platforms that let a team label its own
// namespace do).
func grantTenant(t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	ctx := t.Context()
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenantUser}}
	// edit is an aggregated role whose rules kube-controller-manager fills
	// in from these two (envtest runs no controller manager): bind them.
	for _, role := range []string{"system:aggregate-to-edit", "system:aggregate-to-view"} {
		if _, err := cs.RbacV1().RoleBindings(nsA).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "tenant-" + strings.TrimPrefix(role, "system:")}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.RbacV1().Roles(nsA).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "own-namespace"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"},
			ResourceNames: []string{nsA}, Verbs: []string{"get", "update", "patch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(nsA).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "own-namespace"}, Subjects: subject,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "own-namespace"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// grantStatus gives tenantUser the status subresource of resource (in API
// group group) in nsA: more than the stock edit role, what a role granting
// pods/* or jobs/* gives. Idempotent.
func grantStatus(t *testing.T, cs *kubernetes.Clientset, group, resource string) {
	t.Helper()
	ctx := t.Context()
	name := resource + "-status"
	_, err := cs.RbacV1().Roles(nsA).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{resource + "/status"},
			Verbs: []string{"get", "update", "patch"}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = cs.RbacV1().RoleBindings(nsA).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenantUser}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// applyAdmissionPolicies creates deploy/kubernetes/base/admissionpolicies.yaml as shipped.
func applyAdmissionPolicies(t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "base", "admissionpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ar := cs.AdmissionregistrationV1()
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		var head metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "ValidatingAdmissionPolicy":
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			if err := yaml.UnmarshalStrict([]byte(doc), &p); err != nil {
				t.Fatalf("the shipped policy: %v", err)
			}
			if _, err := ar.ValidatingAdmissionPolicies().Create(t.Context(), &p, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create %s: %v", p.Name, err)
			}
		case "ValidatingAdmissionPolicyBinding":
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			if err := yaml.UnmarshalStrict([]byte(doc), &b); err != nil {
				t.Fatalf("the shipped binding: %v", err)
			}
			if _, err := ar.ValidatingAdmissionPolicyBindings().Create(t.Context(), &b, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create %s: %v", b.Name, err)
			}
		default:
			t.Fatalf("unexpected document of kind %q", head.Kind)
		}
	}
}

// sendReview posts the AdmissionReview of a CREATE of j to itogate's
// webhook as the apiserver would (the tenant's request), and returns its
// answer.
func sendReview(t *testing.T, url string, caPEM []byte, j *batchv1.Job) *admissionv1.AdmissionResponse {
	t.Helper()
	j.TypeMeta = metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"}
	obj, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "22222222-0000-4000-8000-000000000001", Operation: admissionv1.Create,
			Kind:      metav1.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"},
			Resource:  metav1.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"},
			Namespace: j.Namespace, Name: j.Name, UserInfo: authenticationv1.UserInfo{Username: tenantUser},
			Object: runtime.RawExtension{Raw: obj},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil {
		t.Fatalf("webhook answer %d: %v", resp.StatusCode, err)
	}
	return out.Response
}

func waitForWebhook(t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		_, err := cs.BatchV1().Jobs(nsA).Create(ctx, gpuJob("probe", "", 1, 1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "WORKLOAD_TICKET_MISSING") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the apiserver never called the webhook: last answer %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func gpuJob(name, tk string, parallelism int32, gpus int64) *batchv1.Job {
	ann := map[string]string{}
	if tk != "" {
		ann[webhook.TicketAnnotation] = tk
	}
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: batchv1.JobSpec{
			Parallelism: &parallelism,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: ann},
				Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{
					Name: "trainer", Image: "trainer:1",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gpu: *resource.NewQuantity(gpus, resource.DecimalSI)}},
				}}},
			},
		},
	}
}

func gpuPod(name, tk string, owner types.UID, gpus int64) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "trainer", Image: "trainer:1",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{gpu: *resource.NewQuantity(gpus, resource.DecimalSI)}},
		}}},
	}
	if tk != "" {
		p.Annotations[webhook.TicketAnnotation] = tk
	}
	if owner != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: "train", UID: owner, Controller: &yes}}
	}
	return p
}

// warningLog collects the apiserver's warnings (rest.WarningHandler).
type warningLog struct {
	mu   sync.Mutex
	seen []string
}

func (w *warningLog) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warningLog) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

// metrics is itogate's GET /metrics.
func metrics(t *testing.T, apiURL string) string {
	t.Helper()
	resp, err := http.Get(apiURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func qty(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }

func ptr[T any](v T) *T { return &v }

// podWith is a bare Pod whose one container has limits, with tk as its ticket ("" for none).
func podWith(name, tk string, limits corev1.ResourceList) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "trainer", Image: "trainer:1", Resources: corev1.ResourceRequirements{Limits: limits},
		}}},
	}
	if tk != "" {
		p.Annotations[webhook.TicketAnnotation] = tk
	}
	return p
}

func claimTemplate(name string, req resourcev1.ExactDeviceRequest) *resourcev1.ResourceClaimTemplate {
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &req}}}}},
	}
}

var pytorchJobs = schema.GroupVersionResource{Group: "kubeflow.org", Version: "v1", Resource: "pytorchjobs"}

// pytorchJob is a PyTorchJob (the CRD stand-in of testdata/) of one master
// and workers, each Pod with gpus GPUs, with tk as its ticket ("" for none).
func pytorchJob(name, tk string, gpus, workers int64) *unstructured.Unstructured {
	ann := map[string]any{}
	if tk != "" {
		ann[webhook.TicketAnnotation] = tk
	}
	tpl := map[string]any{"metadata": map[string]any{"annotations": ann}, "spec": map[string]any{"containers": []any{
		map[string]any{"name": "pytorch", "image": "trainer:1",
			"resources": map[string]any{"limits": map[string]any{gpu: fmt.Sprint(gpus)}}}}}}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
		"metadata": map[string]any{"name": name, "annotations": ann},
		"spec": map[string]any{"pytorchReplicaSpecs": map[string]any{
			"Master": map[string]any{"replicas": int64(1), "template": tpl},
			"Worker": map[string]any{"replicas": workers, "template": tpl},
		}},
	}}
}

// forge changes one byte of the ticket's signature.
func forge(tk string) string {
	b := []byte(tk)
	i := strings.LastIndexByte(tk, '.') + 3
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// expired re-signs the ticket's claims, already expired, with the
// development ticket key the development server trusts: a valid signature,
// a past exp.
func expired(t *testing.T, tk string) string {
	t.Helper()
	ts, err := trust.Dev()
	if err != nil {
		t.Fatal(err)
	}
	set, err := keys.Dev().Ticket.KeySet()
	if err != nil {
		t.Fatal(err)
	}
	v, err := ticket.NewVerifier(ticket.VerifierOptions{Issuer: trust.DevTicketIssuer, Keys: set})
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify([]byte(tk), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c.IssuedAt, c.Expiry = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	out, err := ts.Tickets.Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func cancelRun(t *testing.T, ctx context.Context, r *scenario.Runner, runID string) {
	t.Helper()
	m, err := r.LoadManifest(fixture)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.Confirm(ctx, "train.cancel", "", "0.00", runID)
	if err != nil {
		t.Fatal(err)
	}
	ent, err := r.EntitlementFor(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := r.Admit(ctx, api.AdmissionRequest{Action: "train.cancel", BookingID: scenario.Booking,
		IdempotencyKey: r.Key("cancel"), EntitlementToken: ent, ConfirmationRef: ref, RunID: runID})
	if err != nil || a.Status != http.StatusOK {
		t.Fatalf("cancel: %d %v %v", a.Status, a.Codes(), err)
	}
}

func writeJob(t *testing.T, dir string, j *batchv1.Job) string {
	t.Helper()
	raw, err := yaml.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, j.Name+".yaml")
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// kubectl runs kubectl as the admin, in the test's working directory; its
// output is stdout and then stderr.
func kubectl(t *testing.T, env *envtest.Environment, args ...string) (string, error) {
	t.Helper()
	return kubectlIn(t, env, "", nil, args...)
}

// kubectlIn runs kubectl as the admin in directory dir ("": the test's),
// with stdin (nil: none); its output is stdout and then stderr.
func kubectlIn(t *testing.T, env *envtest.Environment, dir string, stdin io.Reader, args ...string) (string, error) {
	t.Helper()
	k := env.ControlPlane.KubeCtl()
	cmd := exec.Command(k.Path, append(slices.Clone(k.Opts), args...)...)
	cmd.Dir, cmd.Stdin = dir, stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String() + stderr.String(), err
}

// shippedWebhook reads deploy/kubernetes/base's configuration and points its
// webhooks at url's host (each at its own path), trusting caPEM: everything
// else is as shipped.
func shippedWebhook(t *testing.T, url string, caPEM []byte) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "base", "validatingwebhookconfiguration.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(raw, &vwc); err != nil {
		t.Fatalf("the shipped configuration: %v", err)
	}
	for i := range vwc.Webhooks {
		// Each webhook keeps its own path (/validate, /validate-warn).
		u := strings.TrimSuffix(url, "/validate") + *vwc.Webhooks[i].ClientConfig.Service.Path
		vwc.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: caPEM}
	}
	return &vwc
}

// serving writes a CA and a serving certificate for 127.0.0.1.
func serving(t *testing.T, dir string) (caPEM []byte, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "itogate-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), certFile, keyFile
}

type itogate struct {
	cmd                *exec.Cmd
	apiURL, webhookURL string
	logs               *syncbuf.Buffer
	stopped            bool
}

func (i *itogate) stop(t *testing.T) {
	t.Helper()
	if i.stopped {
		return
	}
	i.stopped = true
	_ = i.cmd.Process.Signal(syscall.SIGTERM)
	_ = i.cmd.Wait()
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startItogate builds and starts `itogate serve` in development mode with
// the webhook listener, and waits until both answer.
func startItogate(t *testing.T, dir, certFile, keyFile string) *itogate {
	t.Helper()
	bin := filepath.Join(dir, "itogate")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/itogate")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	api, hook := freePort(t), freePort(t)
	i := &itogate{apiURL: "http://" + api, webhookURL: "https://" + hook + "/validate", logs: &syncbuf.Buffer{}}
	i.cmd = exec.Command(bin, "serve", "--listen", api, "--data-dir", filepath.Join(dir, "data"),
		"--webhook-listen", hook, "--webhook-cert-file", certFile, "--webhook-key-file", keyFile,
		"--webhook-namespace", nsA+"="+scenario.Account, "--webhook-namespace", nsB+"=acct_other",
		"--webhook-namespace", nsW+"="+scenario.Account)
	i.cmd.Stdout, i.cmd.Stderr = i.logs, i.logs
	i.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := i.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		i.stop(t)
		if t.Failed() {
			t.Logf("itogate output:\n%s", i.logs)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		resp, err := http.Get(i.apiURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return i
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("itogate never became ready: %v\n%s", err, i.logs)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
