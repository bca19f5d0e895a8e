//go:build unix

package webhook_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/verify"
	"github.com/itocompute/itogate/gatekeeper/webhook"
)

// The benchmarks measure the in-process cost of one Pod admission review
// with a valid ticket (docs/performance.md, "Webhook review cost"). They
// report only; nothing here asserts a time.

// cpuSeconds is the process's user+system CPU time in seconds
// (getrusage(RUSAGE_SELF)): every goroutine, the GC included.
func cpuSeconds(b *testing.B) float64 {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// measure runs op b.N times and reports, besides ns/op and allocs/op, the
// CPU seconds per review (user+sys over the loop divided by b.N): CPU, not
// wall time, so a loaded machine does not inflate it with waiting.
func measure(b *testing.B, op func()) {
	b.ReportAllocs()
	b.ResetTimer()
	start := cpuSeconds(b)
	for range b.N {
		op()
	}
	b.StopTimer()
	b.ReportMetric((cpuSeconds(b)-start)/float64(b.N), "cpu-s/review")
}

// benchPod is the reviewed object: a Pod of the Job the run's ticket
// bound, asking for 8 GPUs (gpus_per_node of the ticket), as each of the
// Pods of a multi-node job is.
func benchPod(f *fixture) []byte {
	return reviewBody("", "v1", "Pod", pod("team-a", "train-0", "p0", "uid-job", f.ticket, 8), false)
}

// BenchmarkWebhookPodReview is itogate's full path for one Pod: decode
// the AdmissionReview, verify the ticket (signature, typ, iss, aud, exp),
// read the run and its workload binding from a bbolt ledger, evaluate
// data.ito.workload.decision of the embedded bundle, encode the response.
// The Pod comes from the Job controller's identity and its owner is the
// run's active root after the first review (decision bind "leaf", which the
// binding as read admits), so the ledger is only read.
//
// verify=each: the fixture's verifier caches nothing, so every review
// verifies the signature (the first Pod of a job; the peer's case).
// verify=cached: the verification cache `itogate webhook` configures
// (verify.CacheEntriesFor(PurposeTicket)), as for the other Pods of a
// job, which all present the same ticket.
func BenchmarkWebhookPodReview(b *testing.B) {
	f, cached := boundJob(b)
	body := benchPod(f)
	for _, c := range []struct {
		name string
		h    *webhook.Handler
	}{{"verify=each", f.h}, {"verify=cached", cached}} {
		b.Run(c.name, func(b *testing.B) { measureReview(b, c.h, body) })
	}
}

// boundJob is the fixture with its run's Job bound (so the benchmarks'
// Pods are the run's workload), and a handler beside f.h whose ticket
// verifier caches as `itogate webhook` configures it.
func boundJob(b *testing.B) (*fixture, *webhook.Handler) {
	f := newFixture(b)
	wantAllowed(b, post(b, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 2, 8), false))
	opts := f.opts
	tv, err := ticket.NewVerifier(ticket.VerifierOptions{Issuer: trust.DevTicketIssuer, Keys: f.keys.KeySet(),
		CacheEntries: verify.CacheEntriesFor(verify.PurposeTicket)})
	if err != nil {
		b.Fatal(err)
	}
	opts.Tickets = tv
	cached, err := webhook.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	return f, cached
}

// measureReview measures h's review of body, checking it is allowed
// before and after.
func measureReview(b *testing.B, h *webhook.Handler, body []byte) {
	serve := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		return rec
	}
	wantReviewAllowed(b, serve().Body.Bytes())
	var last *httptest.ResponseRecorder
	measure(b, func() { last = serve() })
	wantReviewAllowed(b, last.Body.Bytes())
}

// trainingPod is benchPod as the Job controller creates a Pod of a real
// multi-node training job and the apiserver sends it: GPU, CPU, memory and
// RDMA quantities as strings in requests (defaulted from the limits) and
// limits, launcher environment, shared memory, a checkpoint volume and
// the service account token mounted, the Job's labels and annotations, a
// grace period and a GPU toleration. Every access check of the workload
// policy that a member of it triggers (env, volumeMounts, the grace period)
// runs, as it does on such Pods.
func trainingPod(f *fixture) []byte {
	p := pod("team-a", "train-0", "p0", "uid-job", f.ticket, 8)
	md := p["metadata"].(map[string]any)
	md["labels"] = map[string]any{"batch.kubernetes.io/controller-uid": "uid-job", "batch.kubernetes.io/job-name": "train",
		"batch.kubernetes.io/job-completion-index": "0", "controller-uid": "uid-job", "job-name": "train"}
	md["annotations"].(map[string]any)["batch.kubernetes.io/job-completion-index"] = "0"
	md["annotations"].(map[string]any)["kubectl.kubernetes.io/default-container"] = "trainer"
	qty := map[string]any{"nvidia.com/gpu": "8", "cpu": "96", "memory": "1600Gi", "rdma/ib": "8"}
	p["spec"] = map[string]any{
		"containers": []any{map[string]any{
			"name": "trainer", "image": "nvcr.io/nvidia/pytorch:25.01-py3",
			"command": []any{"torchrun"}, "args": []any{"--nnodes=2", "--nproc-per-node=8", "train.py"},
			"env": []any{
				map[string]any{"name": "MASTER_ADDR", "value": "train-0.train"},
				map[string]any{"name": "MASTER_PORT", "value": "29500"},
				map[string]any{"name": "NCCL_DEBUG", "value": "WARN"},
				map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}},
			},
			"resources":       map[string]any{"limits": qty, "requests": qty},
			"securityContext": map[string]any{"capabilities": map[string]any{"add": []any{"IPC_LOCK"}}},
			"volumeMounts": []any{
				map[string]any{"name": "dshm", "mountPath": "/dev/shm"},
				map[string]any{"name": "ckpt", "mountPath": "/checkpoints"},
				map[string]any{"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
			},
		}},
		"volumes": []any{
			map[string]any{"name": "dshm", "emptyDir": map[string]any{"medium": "Memory", "sizeLimit": "256Gi"}},
			map[string]any{"name": "ckpt", "persistentVolumeClaim": map[string]any{"claimName": "ckpt"}},
			map[string]any{"name": "kube-api-access-x", "projected": map[string]any{"sources": []any{
				map[string]any{"serviceAccountToken": map[string]any{"path": "token", "expirationSeconds": 3607}}}}},
		},
		"restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "serviceAccountName": "default",
		"tolerations": []any{map[string]any{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}},
	}
	return reviewBody("", "v1", "Pod", p, false)
}

// BenchmarkWebhookTrainingPodReview is BenchmarkWebhookPodReview's
// verify=cached on trainingPod: what the Pods of a real job cost after the
// first.
func BenchmarkWebhookTrainingPodReview(b *testing.B) {
	f, cached := boundJob(b)
	measureReview(b, cached, trainingPod(f))
}

// peerPolicy is the same decision for a Pod as a Gatekeeper/OPA user
// writes it: OPA's io.jwt.decode_verify checks the ticket (signature with
// the same public JWKS, iss, aud, exp at the same clock), then typ and
// action, the namespace's account, and the same GPU counts as ito.workload
// (total ≤ world_size, per Pod ≤ gpus_per_node; a container counts the
// larger of its request and limit). It has no ledger: no run liveness, no
// binding of the Pod's owner.
const peerPolicy = `package peer

request := input.request

obj := request.object

raw := obj.metadata.annotations[data.tickets.annotation]

verified := [header, claims] if {
	[valid, header, claims] := io.jwt.decode_verify(raw, {
		"cert": data.tickets.jwks,
		"iss": data.tickets.issuer,
		"aud": data.tickets.audience,
		"time": data.tickets.time_ns,
	})
	valid
}

claims := verified[1]

_container(c) := sum([n | some r in data.gpu_resources; n := max([
	to_number(object.get(c, ["resources", "limits", r], 0)),
	to_number(object.get(c, ["resources", "requests", r], 0)),
])])

pod_gpus := sum([_container(c) | some c in obj.spec.containers])

deny contains "WORKLOAD_NAMESPACE_UNBOUND" if not data.namespaces[request.namespace]

deny contains "WORKLOAD_TICKET_MISSING" if not raw

deny contains "WORKLOAD_TICKET_INVALID" if not verified

deny contains "WORKLOAD_TICKET_INVALID" if verified[0].typ != "ito-ticket+jwt"

deny contains "WORKLOAD_TICKET_INVALID" if claims.action != "train.create"

deny contains "WORKLOAD_ACCOUNT_MISMATCH" if claims.sub != data.namespaces[request.namespace]

deny contains "WORKLOAD_GPUS_EXCEED_TICKET" if pod_gpus > claims.world_size

deny contains "WORKLOAD_POD_GPUS_EXCEED_NODE" if pod_gpus > claims.gpus_per_node

default allow := false

allow if count(deny) == 0
`

// BenchmarkOPAPeerPodReview is the peer: the same AdmissionReview bytes
// decoded as OPA input, peerPolicy (prepared once) evaluated per op with
// OPA's rego package, and the same response encoded.
func BenchmarkOPAPeerPodReview(b *testing.B) {
	f := newFixture(b)
	store := inmem.NewFromObject(map[string]any{
		"tickets": map[string]any{
			"annotation": webhook.TicketAnnotation, "jwks": string(f.keys.JWKS()), "issuer": trust.DevTicketIssuer, "audience": ticket.DefaultAudience,
			"time_ns": now.UnixNano(),
		},
		"namespaces":    map[string]any{"team-a": "acct_a", "team-b": "acct_b"},
		"gpu_resources": []any{"nvidia.com/gpu", "amd.com/gpu"},
	})
	pq, err := rego.New(rego.Query("allow = data.peer.allow; deny = data.peer.deny"),
		rego.Module("peer.rego", peerPolicy), rego.Store(store)).PrepareForEval(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	body := benchPod(f)
	review := func(body []byte) []byte {
		var in struct {
			Request map[string]any `json:"request"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			b.Fatal(err)
		}
		rs, err := pq.Eval(b.Context(), rego.EvalInput(map[string]any{"request": in.Request}))
		if err != nil {
			b.Fatal(err)
		}
		resp := &admissionv1.AdmissionResponse{UID: "req-train-0"}
		if len(rs) == 1 && rs[0].Bindings["allow"] == true {
			resp.Allowed = true
		} else {
			msg := "WORKLOAD_POLICY_DENIED"
			if len(rs) == 1 {
				d, _ := json.Marshal(rs[0].Bindings["deny"])
				msg = string(d)
			}
			resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Message: msg}
		}
		var buf bytes.Buffer
		if err := json.NewEncoder(&buf).Encode(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Response: resp,
		}); err != nil {
			b.Fatal(err)
		}
		return buf.Bytes()
	}
	// The peer refuses a ticket with one byte of its signature changed, so
	// what is measured below is a real verification.
	forged := f.ticket[:len(f.ticket)-2] + map[bool]string{true: "B", false: "A"}[f.ticket[len(f.ticket)-2] == 'A'] + f.ticket[len(f.ticket)-1:]
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(review(reviewBody("", "v1", "Pod", pod("team-a", "train-0", "p0", "uid-job", forged, 8), false)), &out); err != nil ||
		out.Response == nil || out.Response.Allowed || out.Response.Result.Message != `["WORKLOAD_TICKET_INVALID"]` {
		b.Fatalf("the peer did not refuse a forged ticket: %+v %v", out.Response, err)
	}
	wantReviewAllowed(b, review(body))
	var last []byte
	measure(b, func() { last = review(body) })
	wantReviewAllowed(b, last)
}

// wantReviewAllowed fails b unless body is an AdmissionReview allowing
// the request: a benchmark of a denied review would measure the wrong path.
func wantReviewAllowed(b *testing.B, body []byte) {
	b.Helper()
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &out); err != nil || out.Response == nil {
		b.Fatalf("not a review: %s", body)
	}
	wantAllowed(b, out.Response)
}
