// Package webhook is itogate's Kubernetes validating admission webhook: it
// answers admission.k8s.io/v1 AdmissionReviews for Pods and workload
// objects (docs/kubernetes.md).
//
// One review flows one way: decode → facts (the ticket verified in Go, the
// run and its workload binding read from the ledger, the namespace's
// account from configuration) → the bundle's data.ito.workload.decision →
// for an allowed CREATE/UPDATE that is not a dry run, the ledger binding the
// decision names → the AdmissionReview response. Every deny's
// status.message starts with its stable code; every fault denies (the
// shipped configuration is failurePolicy: Fail, so an unreachable itogate
// denies too).
//
// Only k8s.io/api types are used: no client-go, no calls to the apiserver.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/ticket"
	"github.com/itocompute/itogate/gatekeeper/verify"
)

// TicketAnnotation is the annotation that carries a workload's admission
// ticket (data.ticket of its train.create). Pod templates carry it too, so
// the Pods a controller creates present the same ticket.
const TicketAnnotation = "itogate.io/ticket"

// DefaultMaxReviewBytes bounds a review body when Options.MaxReviewBytes
// is zero (webhook.max_review_bytes): an UPDATE carries the new object (the
// apiserver takes request bodies up to 3 MiB) and the stored one (etcd keeps
// objects up to 1.5 MiB), each JSON-escaped once more inside the review.
const DefaultMaxReviewBytes = 8 << 20

// RunFacts is what the webhook needs of a run.
type RunFacts struct {
	Account, BookingID string
	// Live is the ledger's one notion of a live run: admitted, not ended
	// by train.cancel, train.cleanup or booking.release, not past its end.
	Live bool
	// EndedBy names what ended a run that is not live.
	EndedBy string
	// State is the run's state now (the ledger's RunRecord.State:
	// "live", "halted", "revoked", "cancelled", …).
	State string
	// GPUs is what the run holds of its booking (the ledger's
	// RunRecord.GPUs): the ticket's world_size, or more once a stage
	// advance grew the run into a larger stage. The workload gate caps a
	// run's workloads at it (input.run.gpus).
	GPUs int
}

// Runs answers for a run id (ledger.ErrNotFound when none was admitted).
type Runs interface {
	RunFacts(ctx context.Context, runID string, now time.Time) (RunFacts, error)
}

// Decider evaluates the workload decision of the active bundle.
type Decider interface {
	DecideWorkload(ctx context.Context, input map[string]any) (policy.WorkloadDecision, error)
}

// deviceAnnotator is what a Decider may also know (*policy.Engine does):
// whether its bundle takes a Pod annotation key to inject devices into
// containers (device_annotation_prefixes, device_annotation_keys).
type deviceAnnotator interface {
	DeviceAnnotation(key string) bool
}

// setsDeviceAnnotation: one of the annotation keys an UPDATE set (added or
// changed) injects devices, as d's bundle says. Without d, or a d that
// cannot tell, every key is taken to: the policy judges the UPDATE
// instead of letting it pass as a teardown.
func setsDeviceAnnotation(d Decider, set []string) bool {
	da, ok := d.(deviceAnnotator)
	if !ok {
		return len(set) > 0
	}
	for _, k := range set {
		if da.DeviceAnnotation(k) {
			return true
		}
	}
	return false
}

// TicketVerifier verifies admission tickets (*ticket.Verifier). A ticket
// past its exp still verifies, reporting expired: the ticket authorizes the
// first bind of a run's workload only while it is fresh, and the Pods the
// bound workload's controllers create later are governed by the run's state
// in the ledger (the policy decides both).
type TicketVerifier interface {
	VerifyAllowExpired(raw []byte, now time.Time) (c ticket.Claims, expired bool, err error)
}

// Observer is told of every request ServeHTTP answers (itogate serve
// exports it as Prometheus metrics). It must be safe for concurrent use and
// must not block.
type Observer interface {
	// WebhookReview reports one answered request: result is ResultAllowed,
	// ResultDenied or ResultInvalid; code is the stable code that leads the
	// denial's status.message ("" when allowed; api.CodeReviewInvalid when
	// invalid); d is the time from the request reaching the handler to the
	// response being written.
	WebhookReview(result, code string, d time.Duration)
	// WebhookPanic reports one review whose evaluation panicked; it was
	// answered denied INTERNAL_ERROR (and reported to WebhookReview too).
	WebhookPanic()
}

// Results an Observer is told.
const (
	// ResultAllowed: the review was answered allowed.
	ResultAllowed = "allowed"
	// ResultDenied: the review was answered not allowed (any code, the
	// faults' LEDGER_UNAVAILABLE and POLICY_* included).
	ResultDenied = "denied"
	// ResultInvalid: the request was not an AdmissionReview the handler
	// decides (wrong method, media type, size or shape): HTTP 4xx,
	// nothing decided, and the apiserver's failure policy refuses the
	// object.
	ResultInvalid = "invalid"
	// ResultWarned: a review of the warn endpoint (a namespace labelled
	// itogate.io/enforce=warn) that enforcement would have denied: answered
	// allowed, with the denial as apiserver warnings; code is the code that
	// leads it.
	ResultWarned = "warned"
)

// Options wire a Handler. Every field but Now, Logger, Observer and
// Namespaces is required.
type Options struct {
	Tickets   TicketVerifier
	Runs      Runs
	Workloads ledger.Workloads
	// Policy returns the active decider, or nil when no bundle is active
	// (every review is denied, POLICY_NOT_READY).
	Policy func() Decider
	// Namespaces binds each namespace under itogate's control to its
	// account (webhook.namespaces).
	Namespaces map[string]string
	// Timeout bounds one review (default DefaultTimeout).
	Timeout time.Duration
	// MaxReviewBytes bounds a review body (default DefaultMaxReviewBytes).
	MaxReviewBytes int64
	Now            func() time.Time
	Logger         *slog.Logger
	// Observer, when set, is told of every answered request.
	Observer Observer
}

// DefaultTimeout bounds one review when Options.Timeout is zero: below the
// 5 s timeoutSeconds of the shipped ValidatingWebhookConfiguration.
const DefaultTimeout = 2 * time.Second

// Handler serves POST /validate. It is safe for concurrent use.
type Handler struct{ opts Options }

// New returns a Handler.
func New(opts Options) (*Handler, error) {
	var missing []string
	for name, nilField := range map[string]bool{
		"Tickets": opts.Tickets == nil, "Runs": opts.Runs == nil,
		"Workloads": opts.Workloads == nil, "Policy": opts.Policy == nil,
	} {
		if nilField {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("webhook: options missing: %s", strings.Join(missing, ", "))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxReviewBytes <= 0 {
		opts.MaxReviewBytes = DefaultMaxReviewBytes
	}
	return &Handler{opts: opts}, nil
}

// Warn is the handler of the warn endpoint (POST /validate-warn), which the
// shipped configuration calls for namespaces labelled itogate.io/enforce=warn:
// every review is decided as on /validate, nothing is bound, and a review
// enforcement would deny is answered allowed with the denial as apiserver
// warnings ("itogate would deny: CODE: message") and counted ResultWarned.
func (h *Handler) Warn() http.Handler { return warnHandler{h} }

type warnHandler struct{ h *Handler }

func (w warnHandler) ServeHTTP(rw http.ResponseWriter, r *http.Request) { w.h.serve(rw, r, true) }

// WarnPrefix leads each warning of a review the warn endpoint admits
// although enforcement would deny it.
const WarnPrefix = "itogate would deny: "

// ServeHTTP decodes one AdmissionReview and answers it. A body that is not
// a review gets a plain HTTP 4xx led by its code (the apiserver fails the
// call, and failurePolicy: Fail refuses the object); everything else gets
// HTTP 200 with the review response, allowed or not. A body above the size
// cap whose first bytes name the request's uid is answered as a review
// too, denied REQUEST_TOO_LARGE, so the apiserver shows the reason.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.serve(w, r, false) }

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, warn bool) {
	start := time.Now()
	// A request that is no review gets a plain HTTP error led by its code,
	// with the code's status (api.StatusOf).
	invalid := func(code api.Code, msg string) {
		http.Error(w, string(code)+": "+msg, api.StatusOf(code))
		h.observe(ResultInvalid, string(code), start)
	}
	if r.Method != http.MethodPost {
		invalid(api.CodeMethodNotAllowed, "POST an AdmissionReview")
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		invalid(api.CodeContentType, "Content-Type must be application/json")
		return
	}
	limit := h.opts.MaxReviewBytes
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	switch {
	case err != nil:
		invalid(api.CodeReviewInvalid, "body unreadable")
		return
	case int64(len(body)) > limit:
		msg := fmt.Sprintf("the AdmissionReview is larger than the webhook's cap of %d bytes (webhook.max_review_bytes)", limit)
		uid, ok := requestUID(body)
		if !ok {
			invalid(api.CodeRequestTooLarge, msg)
			return
		}
		req := &admissionv1.AdmissionRequest{UID: uid}
		h.answer(w, req, h.finish(req, review{}, nil, deny(api.CodeRequestTooLarge, msg), start), warn, start)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil ||
		review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" || review.Request.UID == "" {
		invalid(api.CodeReviewInvalid, "not an admission.k8s.io/v1 AdmissionReview with a request")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.Timeout)
	defer cancel()
	h.answer(w, review.Request, h.review(ctx, review.Request, warn), warn, start)
}

// answer writes resp as the AdmissionReview answering req. On the warn
// endpoint a denial is turned into an allowed answer whose warnings carry
// it.
func (h *Handler) answer(w http.ResponseWriter, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse,
	warn bool, start time.Time) {
	result, code := ResultAllowed, ""
	if !resp.Allowed {
		result, code = ResultDenied, leadingCode(resp)
		if warn {
			result = ResultWarned
			var ws []string
			for _, part := range splitFindings(resp.Result.Message) {
				ws = append(ws, WarnPrefix+part)
			}
			resp = &admissionv1.AdmissionResponse{UID: resp.UID, Allowed: true, Warnings: append(ws, resp.Warnings...)}
		}
	}
	resp.Warnings = sanitizeWarnings(resp.Warnings)
	out := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Response: resp,
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(out); err != nil {
		// Not reachable with these types; the apiserver fails the call.
		http.Error(w, string(api.CodeInternal)+": the response did not encode", api.StatusOf(api.CodeInternal))
		h.observe(ResultDenied, string(api.CodeInternal), start)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
	h.observe(result, code, start)
}

// splitFindings splits a denial's message into its "CODE: message" parts
// (denyFindings joins them with "; "; a message's own "; " stays).
func splitFindings(msg string) []string {
	var out []string
	for {
		i, cut := 0, -1
		for {
			j := strings.Index(msg[i:], "; ")
			if j < 0 {
				break
			}
			if rest := msg[i+j+2:]; leadsWithCode(rest) {
				cut = i + j
				break
			}
			i += j + 2
		}
		if cut < 0 {
			return append(out, msg)
		}
		out, msg = append(out, msg[:cut]), msg[cut+2:]
	}
}

// leadsWithCode: s starts with an UPPER_SNAKE code and ": ".
func leadsWithCode(s string) bool {
	code, _, ok := strings.Cut(s, ": ")
	if !ok || code == "" {
		return false
	}
	for _, r := range code {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

// maxWarningRunes bounds one warning: the apiserver shortens longer ones
// to 256 characters once a response's warnings pass 4 KiB.
const maxWarningRunes = 256

// sanitizeWarnings keeps warnings printable (a control character would
// make the apiserver's Warning header invalid) and at most maxWarningRunes
// long; empty ones are dropped.
func sanitizeWarnings(ws []string) []string {
	if len(ws) == 0 {
		return nil
	}
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		w = strings.Map(func(r rune) rune {
			if r < 0x20 || r == 0x7f || r == utf8.RuneError {
				return ' '
			}
			return r
		}, strings.ToValidUTF8(w, " "))
		if rs := []rune(w); len(rs) > maxWarningRunes {
			w = string(rs[:maxWarningRunes-1]) + "…"
		}
		if w = strings.TrimSpace(w); w != "" {
			out = append(out, w)
		}
	}
	return out
}

// requestUID reads request.uid of an AdmissionReview from the first bytes
// of its body (the apiserver writes the uid first in the request), without
// reading the rest; ok is false when those bytes do not name one.
func requestUID(prefix []byte) (types.UID, bool) {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	// into reads one object's members up to key and leaves the decoder at
	// its value.
	into := func(key string) bool {
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return false
		}
		for dec.More() {
			t, err := dec.Token()
			if err != nil {
				return false
			}
			if k, _ := t.(string); k == key {
				return true
			}
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return false
			}
		}
		return false
	}
	if !into("request") || !into("uid") {
		return "", false
	}
	var uid string
	if err := dec.Decode(&uid); err != nil || uid == "" {
		return "", false
	}
	return types.UID(uid), true
}

func (h *Handler) observe(result, code string, start time.Time) {
	if h.opts.Observer != nil {
		h.opts.Observer.WebhookReview(result, code, time.Since(start))
	}
}

// leadingCode is the stable code a denial's status.message starts with.
func leadingCode(resp *admissionv1.AdmissionResponse) string {
	if resp.Result == nil {
		return ""
	}
	code, _, _ := strings.Cut(resp.Result.Message, ":")
	return code
}

// Review decides one admission request, as POST /validate does.
func (h *Handler) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return h.review(ctx, req, false)
}

// review decides req; on the warn endpoint (warn) it binds nothing. A
// panic anywhere in it is answered denied INTERNAL_ERROR, logged with its
// stack and reported to the Observer.
func (h *Handler) review(ctx context.Context, req *admissionv1.AdmissionRequest, warn bool) (resp *admissionv1.AdmissionResponse) {
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			h.opts.Logger.Error("workload review panicked; denied", "uid", string(req.UID),
				"panic", fmt.Sprintf("%T", p), "stack", string(debug.Stack()))
			if h.opts.Observer != nil {
				h.opts.Observer.WebhookPanic()
			}
			resp = h.finish(req, review{}, nil, deny(api.CodeInternal, "the review failed inside itogate; denied"), start)
		}
	}()
	now := h.opts.Now()
	rv, err := newReview(req)
	if err != nil {
		return h.finish(req, rv, nil, deny(api.CodeReviewInvalid, err.Error()), start)
	}
	decider := h.opts.Policy()
	if rv.teardown && setsDeviceAnnotation(decider, rv.podAnnotationsSet) {
		rv.teardown = false // the policy judges the annotations
	}
	input, facts, out := h.facts(ctx, req, rv, now)
	if out != nil {
		return h.finish(req, rv, facts, out, start)
	}
	if decider == nil {
		return h.finish(req, rv, facts, deny(api.CodePolicyNotReady, "no verified policy bundle is active"), start)
	}
	d, err := decider.DecideWorkload(ctx, input)
	if err != nil {
		code := api.CodePolicyEvaluationFailed
		var pe *policy.Error
		if errors.As(err, &pe) {
			code = pe.Code
		}
		h.opts.Logger.Error("workload policy failed", "uid", string(req.UID), "code", code, "err", err)
		return h.finish(req, rv, facts, deny(code, "the policy produced no usable decision; denied"), start)
	}
	facts.bundleRevision = d.BundleRevision
	warnings := findingTexts(d.Warnings)
	if !d.Allow {
		out := denyFindings(d.Violations)
		out.Warnings = warnings
		return h.finish(req, rv, facts, out, start)
	}
	if !warn {
		if out := h.bind(ctx, req, rv, facts, d, now); out != nil {
			out.Warnings = warnings
			return h.finish(req, rv, facts, out, start)
		}
	}
	return h.finish(req, rv, facts, &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}, start)
}

// facts verifies the ticket and reads the run and its binding. A ledger
// fault ends the review (denied); every other outcome is a fact for policy.
func (h *Handler) facts(ctx context.Context, req *admissionv1.AdmissionRequest, rv review, now time.Time) (map[string]any, *reviewFacts, *admissionv1.AdmissionResponse) {
	f := &reviewFacts{}
	tk := map[string]any{"present": false, "changed": rv.ticketChanged}
	run := map[string]any{"found": false}
	binding := map[string]any{"bound": false, "identity": "", "uids": []any{}}
	if raw := rv.ticket; raw != "" {
		tk["present"] = true
		c, expired, err := h.opts.Tickets.VerifyAllowExpired([]byte(raw), now)
		if err != nil {
			tk["verified"] = false
			tk["error"] = "rejected"
			if k, ok := verify.KindOf(err); ok {
				tk["error"] = k.String()
			}
		} else {
			f.jti, f.runID = c.ID, c.RunID
			tk["verified"] = true
			tk["expired"] = expired
			tk["claims"] = c.Map()
			rf, err := h.opts.Runs.RunFacts(ctx, c.RunID, now)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
			case err != nil:
				return nil, f, h.ledgerFault(req, "run", err)
			default:
				run = map[string]any{"found": true, "account": rf.Account, "booking_id": rf.BookingID,
					"live": rf.Live, "ended_by": rf.EndedBy, "state": rf.State, "gpus": rf.GPUs}
			}
			b, err := h.opts.Workloads.WorkloadBinding(ctx, c.RunID)
			switch {
			case errors.Is(err, ledger.ErrNotFound):
			case err != nil:
				return nil, f, h.ledgerFault(req, "workload binding", err)
			default:
				f.binding = b
				uids := make([]any, len(b.UIDs))
				for i, u := range b.UIDs {
					uids[i] = u
				}
				binding = map[string]any{"bound": true, "identity": b.Identity, "uids": uids}
			}
		}
	}
	// account is "" for a namespace bound to no account.
	ns := map[string]any{"name": req.Namespace, "account": h.opts.Namespaces[req.Namespace]}
	rev := map[string]any{
		"operation":    string(req.Operation),
		"dry_run":      req.DryRun != nil && *req.DryRun,
		"kind":         map[string]any{"group": req.Kind.Group, "version": req.Kind.Version, "kind": req.Kind.Kind},
		"resource":     map[string]any{"group": req.Resource.Group, "version": req.Resource.Version, "resource": req.Resource.Resource},
		"sub_resource": req.SubResource,
		"namespace":    req.Namespace,
		"name":         rv.name,
		"user":         req.UserInfo.Username,
		"object":       rv.object,
	}
	if rv.oldObject != nil {
		rev["old_object"] = rv.oldObject
	}
	if rv.teardown {
		rev["teardown"] = true
	}
	input := map[string]any{
		"now":        now.Unix(),
		"review":     rev,
		"namespace":  ns,
		"ticket":     tk,
		"run":        run,
		"binding":    binding,
		"object_ref": map[string]any{"identity": rv.identity, "uid": rv.uid, "owner_uid": rv.ownerUID},
	}
	return input, f, nil
}

// bind records an allowed CREATE or UPDATE in the ledger as the decision
// says; a dry run records nothing (sideEffects: NoneOnDryRun).
func (h *Handler) bind(ctx context.Context, req *admissionv1.AdmissionRequest, rv review, f *reviewFacts,
	d policy.WorkloadDecision, now time.Time) *admissionv1.AdmissionResponse {
	if (req.DryRun != nil && *req.DryRun) || d.Bind == "none" {
		return nil
	}
	b := ledger.WorkloadBind{RunID: f.runID, UID: rv.uid, At: now}
	switch d.Bind {
	case "root":
		b.Identity = rv.identity
	case "leaf":
		// A controller's Pod of the active root: the binding as read
		// admits it with nothing to write (every Pod but a root's first).
		if f.binding.Admits(rv.ownerUID) {
			return nil
		}
		b.OwnerUID, b.Leaf = rv.ownerUID, true
	default:
		// A child workload is charged what the policy counted for it,
		// under its own name (the generated one, not the prefix): the
		// ledger sums the owner's children against the run's GPUs.
		b.OwnerUID, b.GPUs = rv.ownerUID, int(min(d.GPUs, ledger.MaxGPUs))
		b.Identity = req.Kind.Group + "/" + req.Kind.Kind + "/" + req.Namespace + "/" + rv.name
	}
	// Not cancelled with the review: a bind the ledger committed must be
	// answered, or the apiserver retries into WORKLOAD_TICKET_BOUND.
	_, err := h.opts.Workloads.BindWorkload(context.WithoutCancel(ctx), b)
	sink, crossed := errors.AsType[*ledger.SinkBoundError](err)
	over, overGPUs := errors.AsType[*ledger.WorkloadGPUsError](err)
	switch {
	case err == nil:
		return nil
	case overGPUs:
		return deny(api.CodeWorkloadGPUsExceedRun, fmt.Sprintf("%d GPUs requested beside the %d GPUs its controller's other "+
			"children hold, %d admitted: a child's GPUs stay charged until the run ends (a RayService's zero-downtime upgrade "+
			"needs a run for both clusters; or delete the old child first: re-created under its name it takes its charge over, "+
			"and a RayService deleted and re-created starts afresh)", over.GPUs, over.Held, over.RunGPUs))
	case crossed && sink.Job != nil:
		return deny(api.CodeWorkloadTicketBound, fmt.Sprintf("the ticket's run already started job %s of scheduler %s outside Kubernetes; "+
			"one ticket, one workload", sink.Job.JobID, sink.Job.Scheduler))
	case errors.Is(err, ledger.ErrWorkloadBound):
		return deny(api.CodeWorkloadTicketBound, "the ticket already created another workload")
	case errors.Is(err, ledger.ErrWorkloadOwnerUnbound):
		return deny(api.CodeWorkloadOwnerUnbound, "the object's controller is not the workload this ticket created")
	case errors.Is(err, ledger.ErrWorkloadOwnerRetired):
		return deny(api.CodeWorkloadOwnerRetired, "the object's controller belongs to an object of this ticket that was deleted and re-created")
	case errors.Is(err, ledger.ErrNotFound):
		return deny(api.CodeWorkloadRunNotFound, "the run is not admitted")
	case errors.Is(err, ledger.ErrRunHalted), errors.Is(err, ledger.ErrRevoked), errors.Is(err, ledger.ErrRunEnded):
		return deny(api.CodeWorkloadRunNotLive, "the run may take no new work: "+err.Error())
	}
	return h.ledgerFault(req, "bind", err)
}

func (h *Handler) ledgerFault(req *admissionv1.AdmissionRequest, op string, err error) *admissionv1.AdmissionResponse {
	h.opts.Logger.Error("ledger unavailable", "op", op, "uid", string(req.UID), "err", err)
	return deny(api.CodeLedgerUnavailable, "the ledger is unavailable; denied")
}

// reviewFacts are what the log line names (never the ticket).
type reviewFacts struct {
	jti, runID, bundleRevision string
	// binding is the run's binding as facts read it (zero when none).
	binding ledger.WorkloadBinding
}

func (h *Handler) finish(req *admissionv1.AdmissionRequest, rv review, f *reviewFacts,
	resp *admissionv1.AdmissionResponse, start time.Time) *admissionv1.AdmissionResponse {
	resp.UID = req.UID
	if f == nil {
		f = &reviewFacts{}
	}
	code := leadingCode(resp)
	h.opts.Logger.Info("workload review", "uid", string(req.UID), "operation", string(req.Operation),
		"kind", req.Kind.Group+"/"+req.Kind.Kind, "namespace", req.Namespace, "name", rv.name,
		"dry_run", req.DryRun != nil && *req.DryRun, "allowed", resp.Allowed, "code", code,
		"run_id", f.runID, "ticket_jti", f.jti, "bundle_revision", f.bundleRevision,
		"duration_ms", float64(time.Since(start).Microseconds())/1000)
	return resp
}

// findingTexts are the policy's warnings as the apiserver shows them,
// "CODE: message".
func findingTexts(fs []api.Finding) []string {
	if len(fs) == 0 {
		return nil
	}
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f.Code) + ": " + f.Message
	}
	return out
}

// deny is a response whose message starts with the stable code; its
// status.code is the code's (api.StatusOf).
func deny(code api.Code, msg string) *admissionv1.AdmissionResponse {
	status := int32(api.StatusOf(code))
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: status, Reason: reasonFor(status), Message: string(code) + ": " + msg,
	}}
}

// denyFindings answers a policy deny: the lead violation (api.Lead) sets the
// status and leads the message, every other follows as "CODE: message".
func denyFindings(vs []api.Finding) *admissionv1.AdmissionResponse {
	lead, _ := api.Lead(vs)
	parts := []string{string(lead.Code) + ": " + lead.Message}
	skipped := false
	for _, v := range vs {
		if v == lead && !skipped {
			skipped = true
			continue
		}
		parts = append(parts, string(v.Code)+": "+v.Message)
	}
	status := int32(api.StatusOf(lead.Code))
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{
		Status: metav1.StatusFailure, Code: status, Reason: reasonFor(status),
		Message: strings.Join(parts, "; "),
	}}
}

func reasonFor(status int32) metav1.StatusReason {
	switch status {
	case http.StatusBadRequest:
		return metav1.StatusReasonBadRequest
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	case http.StatusRequestEntityTooLarge:
		return metav1.StatusReasonRequestEntityTooLarge
	case http.StatusInternalServerError:
		return metav1.StatusReasonInternalError
	}
	return metav1.StatusReasonForbidden
}
