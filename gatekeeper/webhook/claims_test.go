package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/webhook"
)

// Claims of docs/kubernetes.md ("Failure modes — it fails closed") that
// TestFailClosed leaves open.

// TestWebhookClaim_PolicyFaultsDenyWithTheirCode: "bundle stale,
// evaluation error or deadline, invalid decision → POLICY_BUNDLE_STALE,
// POLICY_EVALUATION_FAILED, POLICY_TIMEOUT, POLICY_DECISION_INVALID (503)":
// each is a denied review with its code leading the message, counted as
// denied, and binds nothing; an error the engine did not code is
// POLICY_EVALUATION_FAILED.
func TestWebhookClaim_PolicyFaultsDenyWithTheirCode(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want api.Code
	}{
		{"stale bundle", &policy.Error{Code: api.CodePolicyBundleStale, Err: errors.New("past its max age")}, api.CodePolicyBundleStale},
		{"evaluation error", &policy.Error{Code: api.CodePolicyEvaluationFailed, Err: errors.New("division by zero")}, api.CodePolicyEvaluationFailed},
		{"deadline", &policy.Error{Code: api.CodePolicyTimeout, Err: errors.New("evaluation exceeded 1s")}, api.CodePolicyTimeout},
		{"invalid decision", &policy.Error{Code: api.CodePolicyDecisionInvalid, Err: errors.New("undefined")}, api.CodePolicyDecisionInvalid},
		{"uncoded error", errors.New("something else"), api.CodePolicyEvaluationFailed},
	}
	f := newFixture(t) // compiling the bundle is the slow part: one fixture, nothing bound by any case
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			opts := f.opts
			opts.Observer = rec
			opts.Policy = func() webhook.Decider {
				return deciderFunc(func(context.Context, map[string]any) (policy.WorkloadDecision, error) {
					return policy.WorkloadDecision{}, tc.err
				})
			}
			h, err := webhook.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			r := post(t, h, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 1, 8), false)
			if r.Allowed || r.Result == nil || r.Result.Code != http.StatusServiceUnavailable ||
				!strings.HasPrefix(r.Result.Message, string(tc.want)+": ") {
				t.Fatalf("answered %+v, want denied 503 led by %s", r.Result, tc.want)
			}
			if api.StatusOf(tc.want) != http.StatusServiceUnavailable {
				t.Fatalf("the registry gives %s status %d, the doc 503", tc.want, api.StatusOf(tc.want))
			}
			if _, err := f.store.WorkloadBinding(t.Context(), f.runID); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("a failed review bound the run: %v", err)
			}
			if len(rec.got) != 1 || rec.got[0] != (observed{webhook.ResultDenied, string(tc.want)}) {
				t.Fatalf("observed %v", rec.got)
			}
		})
	}
}

// TestWebhookClaim_ReviewBoundedByWebhookTimeout: "itogate bounds its own
// review at webhook.timeout (2 s) and answers first": the decision runs
// under a deadline no later than webhook.timeout (2 s when unset), and a
// review still evaluating when it passes is answered, denied
// POLICY_TIMEOUT by the real engine, binding nothing. No wall-clock
// duration is asserted: the decider waits for the deadline to pass.
func TestWebhookClaim_ReviewBoundedByWebhookTimeout(t *testing.T) {
	if webhook.DefaultTimeout != 2*time.Second {
		t.Fatalf("webhook.DefaultTimeout %v, documented 2 s", webhook.DefaultTimeout)
	}
	f := newFixture(t)
	engine := f.opts.Policy()
	for _, timeout := range []time.Duration{0, 20 * time.Millisecond} {
		opts := f.opts
		opts.Timeout = timeout
		bound := timeout
		if bound == 0 {
			bound = webhook.DefaultTimeout
		}
		var sawDeadline bool
		opts.Policy = func() webhook.Decider {
			return deciderFunc(func(ctx context.Context, in map[string]any) (policy.WorkloadDecision, error) {
				deadline, ok := ctx.Deadline()
				sawDeadline = ok && time.Until(deadline) <= bound
				if timeout == 0 {
					return engine.DecideWorkload(ctx, in)
				}
				<-ctx.Done() // a decision still running when webhook.timeout passes
				return engine.DecideWorkload(ctx, in)
			})
		}
		h, err := webhook.New(opts)
		if err != nil {
			t.Fatal(err)
		}
		r := post(t, h, "batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 1, 8), true)
		if !sawDeadline {
			t.Fatalf("timeout %v: the decision ran without a deadline within %v", timeout, bound)
		}
		if timeout == 0 {
			wantAllowed(t, r)
			continue
		}
		if r.Allowed || r.Result == nil || r.Result.Code != http.StatusServiceUnavailable ||
			!strings.HasPrefix(r.Result.Message, string(api.CodePolicyTimeout)+": ") {
			t.Fatalf("a review past webhook.timeout answered %+v, want denied 503 POLICY_TIMEOUT", r.Result)
		}
		if _, err := f.store.WorkloadBinding(t.Context(), f.runID); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("a timed-out review bound the run: %v", err)
		}
	}
}

// TestWebhookClaim_NotAReviewIsPlainHTTP: "not an admission.k8s.io/v1
// AdmissionReview → a plain HTTP error led by its code, each with its one
// status: … 405 METHOD_NOT_ALLOWED (not a POST), 415
// REQUEST_CONTENT_TYPE_UNSUPPORTED", counted as invalid.
func TestWebhookClaim_NotAReviewIsPlainHTTP(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	opts := f.opts
	opts.Observer = rec
	h, err := webhook.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	body := string(reviewBody("batch", "v1", "Job", job("team-a", "train", "uid-job", f.ticket, 1, 8), false))
	cases := []struct {
		name, method, contentType string
		status                    int
		code                      api.Code
	}{
		{"GET", http.MethodGet, "application/json", http.StatusMethodNotAllowed, api.CodeMethodNotAllowed},
		{"PUT", http.MethodPut, "application/json", http.StatusMethodNotAllowed, api.CodeMethodNotAllowed},
		{"text/plain", http.MethodPost, "text/plain", http.StatusUnsupportedMediaType, api.CodeContentType},
		{"no content type", http.MethodPost, "", http.StatusUnsupportedMediaType, api.CodeContentType},
		{"application/jsonx", http.MethodPost, "application/jsonx", http.StatusUnsupportedMediaType, api.CodeContentType},
	}
	for _, tc := range cases {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(tc.method, "/validate", strings.NewReader(body))
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		h.ServeHTTP(w, req)
		if w.Code != tc.status || !strings.HasPrefix(w.Body.String(), string(tc.code)+": ") || api.StatusOf(tc.code) != tc.status {
			t.Errorf("%s: HTTP %d %q, want %d led by %s", tc.name, w.Code, w.Body.String(), tc.status, tc.code)
		}
	}
	if len(rec.got) != len(cases) {
		t.Fatalf("observed %v", rec.got)
	}
	for i, o := range rec.got {
		if o != (observed{webhook.ResultInvalid, string(cases[i].code)}) {
			t.Errorf("%s observed %v, want invalid %s", cases[i].name, o, cases[i].code)
		}
	}
	if _, err := f.store.WorkloadBinding(t.Context(), f.runID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("a request that is no review bound the run: %v", err)
	}
}

// TestWebhookClaim_DocumentedLimits: the numbers docs/kubernetes.md and
// docs/security.md §9 give for the webhook listener.
func TestWebhookClaim_DocumentedLimits(t *testing.T) {
	if webhook.DefaultMaxReviewBytes != 8<<20 {
		t.Errorf("webhook.DefaultMaxReviewBytes %d, documented 8 MiB", webhook.DefaultMaxReviewBytes)
	}
	if webhook.MaxHeaderBytes != 64<<10 {
		t.Errorf("webhook.MaxHeaderBytes %d, documented 64 KiB", webhook.MaxHeaderBytes)
	}
}

// TestContainerListNotAnArrayFailsClosed: a pod spec whose container list
// is null, an object or a string (a custom resource's template the
// apiserver did not prune) is no decision: the policy's evaluation fails
// and the review is denied POLICY_EVALUATION_FAILED, binding nothing;
// never are its other containers' GPUs judged without it. Found by a
// differential review of the workload policy's rewrite for speed, one of
// whose drafts skipped such a list and allowed the Pod.
func TestContainerListNotAnArrayFailsClosed(t *testing.T) {
	f := newFixture(t)
	gpu := map[string]any{"name": "a", "image": "i", "securityContext": map[string]any{"privileged": true},
		"resources": map[string]any{"limits": map[string]any{"nvidia.com/gpu": "8"}}}
	for name, spec := range map[string]map[string]any{
		"ephemeralContainers null": {"containers": []any{gpu}, "ephemeralContainers": nil},
		"containers null":          {"initContainers": []any{gpu}, "containers": nil},
		"initContainers an object": {"initContainers": map[string]any{"x": gpu}, "containers": []any{gpu}},
		"containers a string":      {"initContainers": []any{gpu}, "containers": "x"},
	} {
		t.Run(name, func(t *testing.T) {
			p := pod("team-a", "p-"+strings.ReplaceAll(name, " ", "-"), "uid-"+name, "", f.ticket, 8)
			p["spec"] = spec
			r := post(t, f.h, "", "v1", "Pod", p, false)
			if r.Allowed || r.Result == nil || r.Result.Code != http.StatusServiceUnavailable ||
				!strings.HasPrefix(r.Result.Message, string(api.CodePolicyEvaluationFailed)+": ") {
				t.Fatalf("answered %+v, want denied 503 led by %s", r.Result, api.CodePolicyEvaluationFailed)
			}
			if _, err := f.store.WorkloadBinding(t.Context(), f.runID); !errors.Is(err, ledger.ErrNotFound) {
				t.Fatalf("binding after the denied review: %v, want none", err)
			}
		})
	}
}
