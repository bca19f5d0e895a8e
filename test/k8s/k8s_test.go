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
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/itocompute/itogate/fixtures"
	"github.com/itocompute/itogate/fixtures/keys"
	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/scenario"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/webhook"
	"github.com/itocompute/itogate/internal/syncbuf"
)

const (
	nsA     = "team-a" // bound to scenario.Account, whose runs the test admits
	nsB     = "team-b" // bound to another account
	gpu     = "nvidia.com/gpu"
	fixture = "megatron-llama3-8b-h100-fp8" // 1 node × 8 H100, 6 h
)

// TestWorkloadBoundary is one end-to-end session: each case is a subtest,
// in order, on one apiserver and one itogate.
func TestWorkloadBoundary(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set: run `make test-k8s` (it builds the binaries with hack/k8s-binaries.sh)")
	}
	ctx := t.Context()
	dir := t.TempDir()

	// The control plane. kube-apiserver on loopback cannot reconcile the
	// kubernetes Service's endpoints to 127.0.0.1: no reconciler.
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
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

	// itogate, development mode, with its webhook on its own TLS port.
	caPEM, certFile, keyFile := serving(t, dir)
	it := startItogate(t, dir, certFile, keyFile)

	// The shipped webhook configuration, pointed at this itogate.
	vwc := shippedWebhook(t, it.webhookURL, caPEM)
	if _, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register the webhook: %v", err)
	}
	for _, ns := range []string{nsA, nsB} {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Labels: map[string]string{"itogate.io/enforce": "true"}}}, metav1.CreateOptions{})
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
	t.Run("the Job's Pods, and only its Pods", func(t *testing.T) {
		if created == nil {
			t.Skip("no Job")
		}
		// envtest runs no controllers: create the Pod the Job controller would.
		_, err := cs.CoreV1().Pods(nsA).Create(ctx, gpuPod("train-0", run.Data.Ticket, created.UID, 8), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("the Job's Pod: %v", err)
		}
		_, err = cs.CoreV1().Pods(nsA).Create(ctx, gpuPod("rogue", run.Data.Ticket, "00000000-0000-4000-8000-000000000000", 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_OWNER_UNBOUND")
	})
	t.Run("cancelled run: no new Pods", func(t *testing.T) {
		if created == nil {
			t.Skip("no Job")
		}
		cancelRun(t, ctx, runner, run.Data.RunID)
		_, err := cs.CoreV1().Pods(nsA).Create(ctx, gpuPod("train-1", run.Data.Ticket, created.UID, 8), metav1.CreateOptions{})
		wantForbidden(t, err, "WORKLOAD_RUN_NOT_LIVE")
	})
	t.Run("a system namespace is never blocked", func(t *testing.T) {
		_, err := cs.CoreV1().Pods("kube-system").Create(ctx, gpuPod("system-gpu", "", "", 8), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("kube-system: %v", err)
		}
	})
	t.Run("itogate stopped: creation refused", func(t *testing.T) {
		fresh := admit(t)
		it.stop(t)
		_, err := jobs.Create(ctx, gpuJob("while-down", fresh.Data.Ticket, 1, 8), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), `failed calling webhook "workloads.itogate.io"`) {
			t.Fatalf("with itogate down: %v, want the webhook call to fail and the apiserver to refuse", err)
		}
		if _, err := jobs.Get(ctx, "while-down", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the Job exists: %v", err)
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

func kubectl(t *testing.T, env *envtest.Environment, args ...string) (string, error) {
	t.Helper()
	stdout, stderr, err := env.ControlPlane.KubeCtl().Run(args...)
	var b bytes.Buffer
	if stdout != nil {
		_, _ = io.Copy(&b, stdout)
	}
	if stderr != nil {
		_, _ = io.Copy(&b, stderr)
	}
	return b.String(), err
}

// shippedWebhook reads deploy/kubernetes/base's configuration and points its
// webhooks at url, trusting caPEM: everything else is as shipped.
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
		vwc.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caPEM}
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
		"--webhook-namespace", nsA+"="+scenario.Account, "--webhook-namespace", nsB+"=acct_other")
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
