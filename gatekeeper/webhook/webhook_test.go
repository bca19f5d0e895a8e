package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/trust"
	"github.com/itocompute/itogate/gatekeeper/webhook"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/policies"
)

var now = time.Unix(1_790_000_000, 0).UTC()

// fixture is a webhook over the embedded bundle, a real bbolt ledger with
// one admitted run and the development ticket key.
type fixture struct {
	h      *webhook.Handler
	store  *bolt.Store
	runID  string
	ticket string
	runs   webhook.Runs
	// opts built h, for a handler that differs in one part.
	opts webhook.Options
	// keys signed ticket; its JWKS is what GET /v1/tickets/jwks serves.
	keys *ticket.Signer
}

// cancel commits an admitted train.cancel of the run: the run record ends.
func (f *fixture) cancel(t testing.TB) {
	t.Helper()
	ref := ledger.NewConfirmationRef()
	if err := f.store.DepositConfirmation(t.Context(), ledger.Confirmation{Ref: ref, JTI: "jti-cancel", Account: "acct_a",
		Action: "train.cancel", Token: []byte("x.y.z"), ExpiresAt: now.Add(time.Hour), DepositedAt: now,
		BookingID: "bk_a", RunID: f.runID}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.store.Commit(t.Context(), ledger.Admission{Account: "acct_a", IdempotencyKey: "k-cancel",
		RequestDigest: "sha256:" + strings.Repeat("2", 64), DecisionID: "dec_00000000000000000000000000000002",
		RunID: f.runID, Action: "train.cancel", BookingID: "bk_a", ConfirmationRef: ref, ConfirmationJTI: "jti-cancel",
		BundleRevision: "r", State: api.StateCancelAdmitted, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	engine, err := policy.New(t.Context(), policy.Options{Bundle: policies.Bundle(), Deadline: patience.Deadline})
	if err != nil {
		t.Fatal(err)
	}
	store, err := bolt.Open(filepath.Join(t.TempDir(), "ledger.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ts, err := trust.Dev()
	if err != nil {
		t.Fatal(err)
	}
	// One admitted run of acct_a on bk_a.
	runID, raw := admitRun(t, store, ts.Tickets, "1", "bk_a")
	tv, err := ticket.NewVerifier(ticket.VerifierOptions{Issuer: trust.DevTicketIssuer, Keys: ts.Tickets.KeySet()})
	if err != nil {
		t.Fatal(err)
	}
	runs := webhook.LedgerRuns{Store: store}
	opts := webhook.Options{
		Tickets: tv, Runs: runs, Workloads: store,
		Policy:     func() webhook.Decider { return engine },
		Namespaces: map[string]string{"team-a": "acct_a", "team-b": "acct_b"},
		Now:        func() time.Time { return now },
		// No review of a correctness test may hit a deadline on a loaded
		// machine; the deadlines have tests of their own.
		Timeout: patience.Deadline,
	}
	h, err := webhook.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{h: h, opts: opts, store: store, runID: runID, ticket: raw, runs: runs, keys: ts.Tickets}
}

// admitRun commits an admitted train.create of acct_a on booking (16 GPUs,
// 2 nodes of 8) and returns its run id and ticket; n tells runs apart.
func admitRun(t testing.TB, store *bolt.Store, signer *ticket.Signer, n, booking string) (string, string) {
	t.Helper()
	return admitRunIn(t, store, signer, n, booking, 16, "")
}

// admitRunIn is admitRun on a booking of booked GPUs, the run starting in
// stage.
func admitRunIn(t testing.TB, store *bolt.Store, signer *ticket.Signer, n, booking string, booked int, stage string) (string, string) {
	t.Helper()
	ref := ledger.NewConfirmationRef()
	digest := "sha256:" + strings.Repeat("0", 64)
	if err := store.DepositConfirmation(t.Context(), ledger.Confirmation{Ref: ref, JTI: "jti-" + n, Account: "acct_a",
		Action: "train.create", Token: []byte("x.y.z"), ExpiresAt: now.Add(time.Hour), DepositedAt: now,
		BookingID: booking, ManifestDigest: digest, CostMicroUSD: 1_000_000}); err != nil {
		t.Fatal(err)
	}
	runID := ledger.NewRunID()
	c := ticket.Claims{Account: "acct_a", ID: "dec_0000000000000000000000000000000" + n, RunID: runID, BookingID: booking,
		Action: "train.create", ManifestDigest: digest, WorldSize: 16, Nodes: 2,
		GPUsPerNode: 8, GPUType: "H100-SXM-80GB", Region: "us-east-1", BundleRevision: "r",
		IssuedAt: now.Add(-time.Minute), Expiry: now.Add(time.Hour)}
	raw, err := signer.Issue(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Commit(t.Context(), ledger.Admission{Account: "acct_a", IdempotencyKey: "k" + n,
		RequestDigest: "sha256:" + strings.Repeat(n, 64), DecisionID: c.ID, RunID: runID, Action: "train.create",
		BookingID: booking, ManifestDigest: c.ManifestDigest, ConfirmationRef: ref, ConfirmationJTI: "jti-" + n,
		BundleRevision: "r", State: api.StateAdmitted, CreatedAt: now, Ticket: raw,
		CostMicroUSD: 1_000_000, GPUs: 16, BookedGPUs: booked, LiveUntil: now.Add(7 * time.Hour), Stage: stage}); err != nil {
		t.Fatal(err)
	}
	return runID, raw
}

func job(ns, name, uid, ticket string, parallelism, gpusPerPod int) map[string]any {
	ann := map[string]any{}
	if ticket != "" {
		ann[webhook.TicketAnnotation] = ticket
	}
	return map[string]any{"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid, "annotations": ann},
		"spec": map[string]any{"parallelism": parallelism, "template": map[string]any{"spec": map[string]any{
			"containers": []any{map[string]any{"name": "t", "image": "t",
				"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": gpusPerPod}}}}}}}}
}

func pod(ns, name, uid, ownerUID, ticket string, gpus int) map[string]any {
	meta := map[string]any{"name": name, "namespace": ns, "uid": uid,
		"annotations": map[string]any{webhook.TicketAnnotation: ticket}}
	if ownerUID != "" {
		meta["ownerReferences"] = []any{map[string]any{"apiVersion": "batch/v1", "kind": "Job", "name": "j",
			"uid": ownerUID, "controller": true}}
	}
	return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": map[string]any{
		"containers": []any{map[string]any{"name": "t", "image": "t",
			"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": gpus}}}}}}
}

// jobController is the Job controller's identity, listed in the bundle's
// data.ito.config.workload.controllers.
const jobController = "system:serviceaccount:kube-system:job-controller"

// requester is who sends an object: the Job controller for one with a
// controller ownerReference, unless the test names another in
// metadata.annotations["test/requester"]; "alice" (a tenant) otherwise.
func requester(meta map[string]any) string {
	if ann, _ := meta["annotations"].(map[string]any); ann != nil {
		if u, _ := ann["test/requester"].(string); u != "" {
			return u
		}
	}
	if _, owned := meta["ownerReferences"]; owned {
		return jobController
	}
	return "alice"
}

// reviewBody is the admission.k8s.io/v1 AdmissionReview of a CREATE of
// obj, as the apiserver sends it (request uid "req-<name>").
func reviewBody(group, version, kind string, obj map[string]any, dryRun bool) []byte {
	raw, _ := json.Marshal(obj)
	meta := obj["metadata"].(map[string]any)
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid": "req-" + meta["name"].(string), "operation": "CREATE", "dryRun": dryRun,
			"kind":      map[string]any{"group": group, "version": version, "kind": kind},
			"resource":  map[string]any{"group": group, "version": version, "resource": strings.ToLower(kind) + "s"},
			"namespace": meta["namespace"], "name": meta["name"],
			"userInfo": map[string]any{"username": requester(meta)}, "object": json.RawMessage(raw),
		},
	})
	return body
}

// post sends one AdmissionReview through HTTP and returns the response.
func post(t testing.TB, h http.Handler, group, version, kind string, obj map[string]any, dryRun bool) *admissionv1.AdmissionResponse {
	t.Helper()
	body := reviewBody(group, version, kind, obj, dryRun)
	meta := obj["metadata"].(map[string]any)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("not a review: %s", rec.Body)
	}
	if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || string(out.Response.UID) != "req-"+meta["name"].(string) {
		t.Fatalf("response does not answer the request: %+v", out)
	}
	return out.Response
}

func wantDenied(t testing.TB, r *admissionv1.AdmissionResponse, code string) {
	t.Helper()
	if r.Allowed || r.Result == nil || r.Result.Code != http.StatusForbidden || !strings.HasPrefix(r.Result.Message, code+": ") {
		t.Fatalf("response %+v, want 403 with a message starting %q", r.Result, code)
	}
}

func wantAllowed(t testing.TB, r *admissionv1.AdmissionResponse) {
	t.Helper()
	if !r.Allowed {
		t.Fatalf("denied: %+v", r.Result)
	}
}

// TestReviews walks a run's workload through the webhook: one Job binds
// the ticket, its Pods follow, every other use is refused by its code.
func TestReviews(t *testing.T) {
	f := newFixture(t)
	other := strings.Replace(f.ticket, f.ticket[len(f.ticket)-6:], "AAAAAA", 1)

	// A dry run binds nothing.
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 2, 8), true))
	if _, err := f.store.WorkloadBinding(t.Context(), f.runID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a dry run bound the run: %v", err)
	}
	wantDenied(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "nt", "u0", "", 1, 8), false), "WORKLOAD_TICKET_MISSING")
	wantDenied(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "forged", "u1", other, 1, 8), false), "WORKLOAD_TICKET_INVALID")
	wantDenied(t, post(t, f.h, "batch", "v1", "Job", job("team-b", "train", "u2", f.ticket, 1, 8), false), "WORKLOAD_ACCOUNT_MISMATCH")
	wantDenied(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "big", "u3", f.ticket, 3, 8), false), "WORKLOAD_GPUS_EXCEED_TICKET")
	wantDenied(t, post(t, f.h, "batch", "v1", "Job", job("team-x", "train", "u4", f.ticket, 1, 8), false), "WORKLOAD_NAMESPACE_UNBOUND")

	// The first CREATE binds; a retried create of the same name is the same workload.
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 2, 8), false))
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-job-2", f.ticket, 2, 8), false))
	b, err := f.store.WorkloadBinding(t.Context(), f.runID)
	if err != nil || b.Identity != "batch/Job/team-a/train" || len(b.UIDs) != 2 {
		t.Fatalf("binding %+v %v", b, err)
	}
	wantDenied(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "second", "u5", f.ticket, 1, 8), false), "WORKLOAD_TICKET_BOUND")

	// The Job's Pods are allowed; a Pod claiming another owner is not.
	wantAllowed(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "train-0", "p0", "uid-job", f.ticket, 8), false))
	wantDenied(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "rogue", "p1", "uid-else", f.ticket, 8), false), "WORKLOAD_OWNER_UNBOUND")
	wantDenied(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "fat", "p2", "uid-job", f.ticket, 9), false), "WORKLOAD_POD_GPUS_EXCEED_NODE")

	// After its cancel is admitted, the run creates no new Pods.
	f.cancel(t)
	wantDenied(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "train-1", "p3", "uid-job", f.ticket, 8), false), "WORKLOAD_RUN_NOT_LIVE")
}

// TestGPUCapFollowsTheRun: the cap on a run's workloads is what the run
// holds in the ledger, not its ticket's world_size: once a stage advance
// grew the run from 16 to 32 GPUs, the run's first ticket admits a Job of
// 4 × 8 GPUs, and one of 5 × 8 is refused naming the 32.
func TestGPUCapFollowsTheRun(t *testing.T) {
	f := newFixture(t)
	runID, raw := admitRunIn(t, f.store, f.keys, "2", "bk_grow", 32, "pretrain")
	wantDenied(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "three", "u-3", raw, 3, 8), false), "WORKLOAD_GPUS_EXCEED_TICKET")

	ref := ledger.NewConfirmationRef()
	if err := f.store.DepositConfirmation(t.Context(), ledger.Confirmation{Ref: ref, JTI: "jti-adv", Account: "acct_a",
		Action: "train.stage.advance", Token: []byte("x.y.z"), ExpiresAt: now.Add(time.Hour), DepositedAt: now,
		BookingID: "bk_grow", RunID: runID}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.store.Commit(t.Context(), ledger.Admission{Account: "acct_a", IdempotencyKey: "k-adv",
		RequestDigest: "sha256:" + strings.Repeat("3", 64), DecisionID: "dec_00000000000000000000000000000003",
		RunID: runID, Action: "train.stage.advance", BookingID: "bk_grow", ConfirmationRef: ref, ConfirmationJTI: "jti-adv",
		BundleRevision: "r", State: api.StateStageAdvanced, CreatedAt: now, FromStage: "pretrain", Stage: "long_context",
		StageGPUs: 32}); err != nil {
		t.Fatal(err)
	}
	rf, err := f.runs.RunFacts(t.Context(), runID, now)
	if err != nil || rf.GPUs != 32 {
		t.Fatalf("RunFacts after the grow = %+v, %v; want 32 GPUs", rf, err)
	}
	r := post(t, f.h, "batch", "v1", "Job", job("team-a", "five", "u-5", raw, 5, 8), false)
	wantDenied(t, r, "WORKLOAD_GPUS_EXCEED_TICKET")
	if !strings.Contains(r.Result.Message, "40 GPUs requested, 32 admitted") {
		t.Fatalf("message %q, want the run's 32 GPUs named", r.Result.Message)
	}
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "four", "u-4", raw, 4, 8), false))
}

// TestFailClosed: every fault denies with its code.
func TestFailClosed(t *testing.T) {
	f := newFixture(t)
	noPolicy, err := webhook.New(webhook.Options{Tickets: okVerifier{}, Runs: f.runs, Workloads: f.store,
		Policy: func() webhook.Decider { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	r := post(t, noPolicy, "batch", "v1", "Job", job("team-a", "train", "u", f.ticket, 1, 8), false)
	if r.Allowed || r.Result.Code != http.StatusServiceUnavailable || !strings.HasPrefix(r.Result.Message, string(api.CodePolicyNotReady)+": ") {
		t.Fatalf("no bundle: %+v", r.Result)
	}
	f.store.Close()
	r = post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "u", f.ticket, 1, 8), false)
	if r.Allowed || r.Result.Code != http.StatusServiceUnavailable || !strings.HasPrefix(r.Result.Message, string(api.CodeLedgerUnavailable)+": ") {
		t.Fatalf("closed ledger: %+v", r.Result)
	}
	for name, body := range map[string]string{
		"not JSON":        "{",
		"no request":      `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
		"v1beta1":         `{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"x"}}`,
		"request w/o uid": `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`,
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/validate", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		f.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest || !strings.HasPrefix(rec.Body.String(), string(api.CodeReviewInvalid)) {
			t.Errorf("%s: HTTP %d %s", name, rec.Code, rec.Body)
		}
	}
}

type okVerifier struct{}

func (okVerifier) VerifyAllowExpired([]byte, time.Time) (ticket.Claims, bool, error) {
	return ticket.Claims{}, false, nil
}

// TestTicketAnnotationIsBundleData: the annotation Go reads is the one the
// policy's messages name.
func TestTicketAnnotationIsBundleData(t *testing.T) {
	raw, err := policiesFile("ito/tables/workloads/data.json")
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		TicketAnnotation string `json:"ticket_annotation"`
	}
	if err := json.Unmarshal(raw, &table); err != nil || table.TicketAnnotation != webhook.TicketAnnotation {
		t.Fatalf("bundle says %q, Go reads %q (%v)", table.TicketAnnotation, webhook.TicketAnnotation, err)
	}
}

// TestMetadataReadAsPolicyReadsIt: Go reads the ticket, uid and owner by
// their exact member names, as the policy does: a ticket under
// "Annotations" is no ticket, and metadata of the wrong shape is not a
// review the webhook decides.
func TestMetadataReadAsPolicyReadsIt(t *testing.T) {
	f := newFixture(t)
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 2, 8), false))

	p := pod("team-a", "p-case", "uid-p", "uid-job", "", 8)
	meta := p["metadata"].(map[string]any)
	delete(meta, "annotations")
	meta["Annotations"] = map[string]any{webhook.TicketAnnotation: f.ticket}
	wantDenied(t, post(t, f.h, "", "v1", "Pod", p, false), "WORKLOAD_TICKET_MISSING")

	for name, bad := range map[string]func(map[string]any){
		"uid not a string":            func(m map[string]any) { m["uid"] = []any{"x"} },
		"annotation value not string": func(m map[string]any) { m["annotations"] = map[string]any{"a": 1} },
		"ownerReferences not a list":  func(m map[string]any) { m["ownerReferences"] = "uid-job" },
		"controller not a bool":       func(m map[string]any) { m["ownerReferences"].([]any)[0].(map[string]any)["controller"] = "true" },
		"owner uid not a string":      func(m map[string]any) { m["ownerReferences"].([]any)[0].(map[string]any)["uid"] = 7 },
	} {
		p := pod("team-a", "p-bad", "uid-p", "uid-job", f.ticket, 8)
		bad(p["metadata"].(map[string]any))
		r := post(t, f.h, "", "v1", "Pod", p, false)
		if r.Allowed || r.Result == nil || r.Result.Code != http.StatusBadRequest ||
			r.Result.Message != "WORKLOAD_REVIEW_INVALID: the object's metadata does not decode" {
			t.Errorf("%s: %+v", name, r.Result)
		}
	}

	// The controller's uid is the last ownerReference with controller: true.
	p = pod("team-a", "p-owners", "uid-p", "uid-job", f.ticket, 8)
	refs := p["metadata"].(map[string]any)["ownerReferences"].([]any)
	p["metadata"].(map[string]any)["ownerReferences"] = append([]any{
		map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "uid-other", "controller": false},
		map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "name": "d", "uid": "uid-other-2", "controller": nil},
	}, refs...)
	wantAllowed(t, post(t, f.h, "", "v1", "Pod", p, false))
}

// request is one AdmissionReview request for postRequest: what the
// apiserver sends for a CREATE, an UPDATE (with the stored object) or an
// UPDATE of a subresource.
type request struct {
	op, sub                   string
	group, version, kind, res string
	obj, old                  map[string]any
}

// postRequest sends one AdmissionReview through HTTP and returns the
// response (request uid "req-<name>").
func postRequest(t testing.TB, h http.Handler, r request) *admissionv1.AdmissionResponse {
	t.Helper()
	raw, _ := json.Marshal(r.obj)
	meta := r.obj["metadata"].(map[string]any)
	req := map[string]any{
		"uid": "req-" + meta["name"].(string), "operation": r.op, "subResource": r.sub,
		"kind":      map[string]any{"group": r.group, "version": r.version, "kind": r.kind},
		"resource":  map[string]any{"group": r.group, "version": r.version, "resource": r.res},
		"namespace": "team-a", "name": meta["name"],
		"userInfo": map[string]any{"username": requester(meta)}, "object": json.RawMessage(raw),
	}
	if r.old != nil {
		old, _ := json.Marshal(r.old)
		req["oldObject"] = json.RawMessage(old)
	}
	body, _ := json.Marshal(map[string]any{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
	rec := httptest.NewRecorder()
	hr := httptest.NewRequest(http.MethodPost, "/validate", bytes.NewReader(body))
	hr.Header.Set("Content-Type", "application/json")
	h.ServeHTTP(rec, hr)
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
		t.Fatalf("not a review: %s", rec.Body)
	}
	return out.Response
}

func podSpec(containers ...map[string]any) map[string]any {
	cs := make([]any, len(containers))
	for i, c := range containers {
		cs[i] = c
	}
	return map[string]any{"containers": cs}
}

func container(name string, limits map[string]any) map[string]any {
	return map[string]any{"name": name, "image": "i", "resources": map[string]any{"limits": limits}}
}

// childPod is a Pod of the bound Job "uid-job" with the run's ticket.
func childPod(name, ticket string, spec map[string]any) map[string]any {
	p := pod("team-a", name, "uid-"+name, "uid-job", ticket, 0)
	p["spec"] = spec
	return p
}

// TestCountedPaths: each path by which a Pod or workload reaches GPUs is
// counted against the ticket (16 GPUs, 8 per node), through the handler.
func TestCountedPaths(t *testing.T) {
	f := newFixture(t)
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 2, 8), false))
	pods := func(name string, spec map[string]any) *admissionv1.AdmissionResponse {
		return post(t, f.h, "", "v1", "Pod", childPod(name, f.ticket, spec), false)
	}
	sidecar := container("warm", map[string]any{"nvidia.com/gpu": "4"})
	sidecar["restartPolicy"] = "Always"
	init := container("warm", map[string]any{"nvidia.com/gpu": "8"})

	// Native sidecars add up with the app; an ordinary init container does not.
	spec := podSpec(container("t", map[string]any{"nvidia.com/gpu": "8"}))
	spec["initContainers"] = []any{sidecar}
	wantDenied(t, pods("sidecar", spec), "WORKLOAD_POD_GPUS_EXCEED_NODE")
	spec["initContainers"] = []any{init}
	wantAllowed(t, pods("init", spec))

	// MIG slices and DRA extended resources are GPUs; without a ticket, refused.
	for _, r := range []string{"nvidia.com/mig-1g.10gb", "deviceclass.resource.kubernetes.io/gpu.nvidia.com"} {
		p := pod("team-a", "bare", "uid-bare", "", "", 0)
		p["spec"] = podSpec(container("t", map[string]any{r: "1"}))
		delete(p["metadata"].(map[string]any), "annotations")
		wantDenied(t, post(t, f.h, "", "v1", "Pod", p, false), "WORKLOAD_TICKET_MISSING")
	}

	// A Pod naming a DRA claim template is charged a whole node, a standalone claim is unknown.
	spec = podSpec(container("t", map[string]any{"cpu": "1"}))
	spec["resourceClaims"] = []any{map[string]any{"name": "gpus", "resourceClaimTemplateName": "gpus"}}
	wantAllowed(t, pods("dra-template", spec))
	spec["resourceClaims"] = []any{map[string]any{"name": "gpus", "resourceClaimName": "shared"}}
	wantDenied(t, pods("dra-claim", spec), "WORKLOAD_GPU_COUNT_UNKNOWN")

	// GPU access without a count.
	env := container("t", map[string]any{"nvidia.com/gpu": "4"})
	env["env"] = []any{map[string]any{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}}
	wantDenied(t, pods("env", podSpec(env)), "WORKLOAD_GPU_ACCESS_UNCOUNTED")
	priv := container("t", map[string]any{"nvidia.com/gpu": "8"})
	priv["securityContext"] = map[string]any{"privileged": true}
	wantAllowed(t, pods("whole-node", podSpec(priv)))
	// 8 MIG slices are 8 GPUs of the ticket but hold no node: privileged, refused.
	mig := container("t", map[string]any{"nvidia.com/mig-1g.10gb": "8"})
	mig["securityContext"] = map[string]any{"privileged": true}
	wantDenied(t, pods("mig-privileged", podSpec(mig)), "WORKLOAD_GPU_ACCESS_UNCOUNTED")
	// The toolkit's device list by plain string prefix, and an NRI device annotation.
	list := container("t", map[string]any{"nvidia.com/gpu": "4"})
	list["volumeMounts"] = []any{map[string]any{"name": "null", "mountPath": "/var/run/nvidia-container-devicesall"}}
	wantDenied(t, pods("device-list", podSpec(list)), "WORKLOAD_GPU_ACCESS_UNCOUNTED")
	annotated := childPod("nri", f.ticket, podSpec(container("t", map[string]any{"nvidia.com/gpu": "4"})))
	annotated["metadata"].(map[string]any)["annotations"].(map[string]any)["devices.noderesource.dev"] = "- path: /dev/nvidia0"
	wantDenied(t, post(t, f.h, "", "v1", "Pod", annotated, false), "WORKLOAD_GPU_ACCESS_UNCOUNTED")

	// A claim template: its devices are counted when it is created.
	tpl := func(name string, exactly map[string]any) map[string]any {
		return map[string]any{"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
			"metadata": map[string]any{"name": name, "namespace": "team-a"},
			"spec": map[string]any{"spec": map[string]any{"devices": map[string]any{"requests": []any{
				map[string]any{"name": "gpus", "exactly": exactly}}}}}}
	}
	claimReq := func(obj map[string]any) request {
		return request{op: "CREATE", group: "resource.k8s.io", version: "v1", kind: "ResourceClaimTemplate",
			res: "resourceclaimtemplates", obj: obj}
	}
	wantAllowed(t, postRequest(t, f.h, claimReq(tpl("eight", map[string]any{"deviceClassName": "gpu.nvidia.com",
		"allocationMode": "ExactCount", "count": 8}))))
	wantDenied(t, postRequest(t, f.h, claimReq(tpl("all", map[string]any{"deviceClassName": "gpu.nvidia.com",
		"allocationMode": "All"}))), "WORKLOAD_GPU_COUNT_UNKNOWN")
}

// TestChangesThatRun: the verbs and subresources that change what runs.
func TestChangesThatRun(t *testing.T) {
	f := newFixture(t)
	j := job("team-a", "train", "uid-job", f.ticket, 2, 8)
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", j, false))

	// The ticket of a stored object cannot be swapped for another run's
	// (which would bind that run too); an UPDATE that keeps it is decided as before.
	_, other := admitRun(t, f.store, f.keys, "2", "bk_b")
	swapped := job("team-a", "train", "uid-job", other, 2, 8)
	update := request{op: "UPDATE", group: "batch", version: "v1", kind: "Job", res: "jobs", obj: swapped, old: j}
	wantDenied(t, postRequest(t, f.h, update), "WORKLOAD_TICKET_CHANGED")
	update.obj = job("team-a", "train", "uid-job", f.ticket, 1, 8)
	wantAllowed(t, postRequest(t, f.h, update))
	update.old = nil
	if r := postRequest(t, f.h, update); r.Allowed || r.Result.Code != http.StatusBadRequest ||
		r.Result.Message != "WORKLOAD_REVIEW_INVALID: the UPDATE carries no old object" {
		t.Fatalf("UPDATE without its old object: %+v", r.Result)
	}

	// The scale subresource: down is allowed, up cannot be counted.
	scale := func(n int) map[string]any {
		return map[string]any{"apiVersion": "autoscaling/v1", "kind": "Scale",
			"metadata": map[string]any{"name": "train", "namespace": "team-a"}, "spec": map[string]any{"replicas": n}}
	}
	up := request{op: "UPDATE", sub: "scale", group: "autoscaling", version: "v1", kind: "Scale", res: "pytorchjobs",
		obj: scale(4), old: scale(2)}
	wantDenied(t, postRequest(t, f.h, up), "WORKLOAD_SCALE_UNCOUNTED")
	up.obj = scale(1)
	wantAllowed(t, postRequest(t, f.h, up))

	// An ephemeral container reaching GPUs by a variable is refused; a plain one is not.
	p := childPod("train-0", f.ticket, podSpec(container("t", map[string]any{"nvidia.com/gpu": "4"})))
	wantAllowed(t, post(t, f.h, "", "v1", "Pod", p, false))
	debug := map[string]any{"name": "debug", "image": "busybox"}
	withDebug := childPod("train-0", f.ticket, podSpec(container("t", map[string]any{"nvidia.com/gpu": "4"})))
	withDebug["spec"].(map[string]any)["ephemeralContainers"] = []any{debug}
	eph := request{op: "UPDATE", sub: "ephemeralcontainers", group: "", version: "v1", kind: "Pod", res: "pods",
		obj: withDebug, old: p}
	wantAllowed(t, postRequest(t, f.h, eph))
	debug["env"] = []any{map[string]any{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}}
	wantDenied(t, postRequest(t, f.h, eph), "WORKLOAD_GPU_ACCESS_UNCOUNTED")
}

// inputRecorder is a Decider that keeps the input it was given.
type inputRecorder struct{ input map[string]any }

func (r *inputRecorder) DecideWorkload(_ context.Context, in map[string]any) (policy.WorkloadDecision, error) {
	r.input = in
	return policy.WorkloadDecision{Decision: policy.Decision{Allow: true, Violations: []api.Finding{}}, Bind: "none"}, nil
}

// TestPolicyInput: what Go establishes for the policy besides the ticket and
// the ledger: the subresource, the resource and the object without
// metadata.managedFields.
func TestPolicyInput(t *testing.T) {
	f := newFixture(t)
	rec := &inputRecorder{}
	opts := f.opts
	opts.Policy = func() webhook.Decider { return rec }
	h, err := webhook.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	p := childPod("p", f.ticket, podSpec(container("t", map[string]any{"nvidia.com/gpu": "8"})))
	p["metadata"].(map[string]any)["managedFields"] = []any{map[string]any{"manager": "kubectl", "fieldsV1": map[string]any{"f:spec": map[string]any{}}}}
	wantAllowed(t, postRequest(t, h, request{op: "CREATE", group: "", version: "v1", kind: "Pod", res: "pods", obj: p}))
	review := rec.input["review"].(map[string]any)
	if review["sub_resource"] != "" || review["resource"].(map[string]any)["resource"] != "pods" {
		t.Errorf("review %v", review)
	}
	// review.keys is the policy engine's to set (policy.DecideWorkload).
	if keys, ok := review["keys"]; ok {
		t.Errorf("the webhook set review.keys: %v", keys)
	}
	if _, ok := review["object"].(map[string]any)["metadata"].(map[string]any)["managedFields"]; ok {
		t.Error("the object keeps managedFields")
	}
	if tk := rec.input["ticket"].(map[string]any); tk["changed"] != false {
		t.Errorf("ticket %v", tk)
	}
	if ns := rec.input["namespace"].(map[string]any); ns["account"] != "acct_a" {
		t.Errorf("namespace %v", ns)
	}
}

// TestWhoMayRun: a child is admitted only from a listed controller, a bare
// Pod is a workload of its own, one root object of a name has children at
// a time, and a generateName create retried after a lost answer keeps its
// ticket.
func TestWhoMayRun(t *testing.T) {
	f := newFixture(t)
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-1", f.ticket, 2, 8), false))
	tenantPod := pod("team-a", "borrow", "p-t", "uid-1", f.ticket, 8)
	tenantPod["metadata"].(map[string]any)["annotations"].(map[string]any)["test/requester"] = "alice"
	wantDenied(t, post(t, f.h, "", "v1", "Pod", tenantPod, false), "WORKLOAD_CHILD_CREATOR_UNTRUSTED")
	wantDenied(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "bare", "p-b", "", f.ticket, 8), false), "WORKLOAD_TICKET_BOUND")

	// The Job's Pods; then the Job deleted and re-created under its name:
	// the new one's first Pod makes it the one that runs.
	wantAllowed(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "train-0", "p0", "uid-1", f.ticket, 8), false))
	wantAllowed(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "train-1", "p1", "uid-1", f.ticket, 8), false))
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-2", f.ticket, 2, 8), false))
	wantAllowed(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "train-2", "p2", "uid-2", f.ticket, 8), false))
	wantDenied(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "train-3", "p3", "uid-1", f.ticket, 8), false), "WORKLOAD_OWNER_RETIRED")
	b, err := f.store.WorkloadBinding(t.Context(), f.runID)
	if err != nil || b.Active != "uid-2" || !slices.Equal(b.UIDs, []string{"uid-1", "uid-2"}) {
		t.Fatalf("binding %+v %v: want uid-2 active and no Pod recorded", b, err)
	}

	// generateName: the apiserver sent gen-abcde, its answer was lost, the
	// client's retry is gen-fghij. Both are the run's workload; the one
	// whose controller creates a Pod first runs.
	runID, tk := admitRun(t, f.store, f.keys, "2", "bk_gen")
	generated := func(name, uid string) map[string]any {
		j := job("team-a", name, uid, tk, 2, 8)
		j["metadata"].(map[string]any)["generateName"] = "gen-"
		return j
	}
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", generated("gen-abcde", "g-1"), false))
	wantAllowed(t, post(t, f.h, "batch", "v1", "Job", generated("gen-fghij", "g-2"), false))
	if b, err := f.store.WorkloadBinding(t.Context(), runID); err != nil || b.Identity != "batch/Job/team-a/gen-*" {
		t.Fatalf("binding %+v %v", b, err)
	}
	wantAllowed(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "gen-fghij-0", "gp0", "g-2", tk, 8), false))
	wantDenied(t, post(t, f.h, "", "v1", "Pod", pod("team-a", "gen-abcde-0", "gp1", "g-1", tk, 8), false), "WORKLOAD_TICKET_BOUND")
	// A bare Pod keeps its generated name: one Pod per ticket.
	runID3, tk3 := admitRun(t, f.store, f.keys, "3", "bk_solo")
	bare := func(name, uid string) map[string]any {
		p := pod("team-a", name, uid, "", tk3, 8)
		p["metadata"].(map[string]any)["generateName"] = "solo-"
		return p
	}
	wantAllowed(t, post(t, f.h, "", "v1", "Pod", bare("solo-abcde", "s-1"), false))
	wantDenied(t, post(t, f.h, "", "v1", "Pod", bare("solo-fghij", "s-2"), false), "WORKLOAD_TICKET_BOUND")
	if b, err := f.store.WorkloadBinding(t.Context(), runID3); err != nil || b.Identity != "/Pod/team-a/solo-abcde" {
		t.Fatalf("bare Pod binding %+v %v", b, err)
	}
}

// TestTicketOfAStartedJob: a run whose tickets started a scheduler job
// (POST /v1/tickets/verify with a job id) creates no Kubernetes workload:
// the Job's CREATE is WORKLOAD_TICKET_BOUND naming the job, and nothing is
// bound.
func TestTicketOfAStartedJob(t *testing.T) {
	f := newFixture(t)
	if _, err := f.store.BindJob(t.Context(), ledger.JobBind{RunID: f.runID, Scheduler: "slurm-ctl", JobID: "4711", At: now}); err != nil {
		t.Fatal(err)
	}
	r := post(t, f.h, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 2, 8), false)
	wantDenied(t, r, "WORKLOAD_TICKET_BOUND")
	if !strings.Contains(r.Result.Message, "already started job 4711 of scheduler slurm-ctl outside Kubernetes") {
		t.Fatalf("message %q, want the job named", r.Result.Message)
	}
	if _, err := f.store.WorkloadBinding(t.Context(), f.runID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the refused CREATE left a binding: %v", err)
	}
}
