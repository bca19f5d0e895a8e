// Package codes lists every stable code itogate can answer with: the policy's
// codes, read from the bundle's METADATA (custom.code, custom.gate, title,
// description, custom.fix), and the codes Go produces before or after the
// policy. docs/codes.md is generated from this list (`make codes`) and a test
// fails when the committed file is stale.
package codes

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/manifest"
	"github.com/itocompute/itogate/gatekeeper/policy"
	"github.com/itocompute/itogate/gatekeeper/server"
	"github.com/itocompute/itogate/gatekeeper/webhook"
)

// Entry documents one code.
type Entry struct {
	Code    string
	Gate    string // policy gate, or the pipeline step for Go codes
	Level   string // "deny", "warn" (policy advisories) or "error" (Go)
	Status  int    // HTTP status of the response that carries it
	Meaning string
	Fix     string
}

// Go lists the codes produced in Go, in pipeline order.
func Go() []Entry {
	e := func(code, step string, status int, meaning, fix string) Entry {
		return Entry{Code: code, Gate: step, Level: "error", Status: status, Meaning: meaning, Fix: fix}
	}
	return []Entry{
		e(admission.CodeRequestTooLarge, "request", http.StatusRequestEntityTooLarge, "The request body exceeds limits.max_body_bytes.", "Send a manifest of at most 1 MiB."),
		e(admission.CodeRequestTimeout, "request", http.StatusRequestTimeout, "The request body did not arrive within limits.request_timeout.", "Send the whole body promptly; check the network path to itogate, then retry with the same idempotency key."),
		e(admission.CodeContentType, "request", http.StatusUnsupportedMediaType, "Content-Type is not application/json.", "Send application/json (UTF-8)."),
		e(admission.CodeRequestInvalid, "request", http.StatusBadRequest, "The body is not one strict JSON object of the documented fields (duplicate or case-variant keys, unknown fields, wrong types, bad ids).", "Fix the named field."),
		e(admission.CodeCallerUnauthenticated, "caller", http.StatusUnauthorized, "No bearer token, or it does not verify with the callers' key set, issuer and audience.", "Send a current token from the configured identity provider."),
		e(admission.CodeDepositorUnauthorized, "deposit", http.StatusUnauthorized, "The confirmation authority's bearer token does not verify with the depositors' key set.", "Deposit with the authority's own identity; caller tokens are refused."),
		e(admission.CodeManifestRequired, "manifest", http.StatusBadRequest, "train.create without manifest bytes.", "Send the manifest, base64-encoded."),
		e(admission.CodeManifestEncoding, "manifest", http.StatusBadRequest, "The manifest field is not standard base64.", "Encode the exact bytes with RFC 4648 §4 base64."),
		e(manifest.CodeTooLarge, "manifest", http.StatusRequestEntityTooLarge, "The manifest is larger than 1 MiB.", "Move bulky parts (data lists) behind references."),
		e(admission.CodeManifestSignature, "manifest", http.StatusForbidden, "The detached signature does not verify over the exact manifest bytes with any pinned signer key.", "Re-sign the bytes you send (itogate sign or cosign sign-blob --key)."),
		e(manifest.CodeMalformed, "manifest", http.StatusBadRequest, "The manifest is not strict JSON (duplicate or case-variant keys, invalid UTF-8, deep nesting, trailing data).", "Fix the JSON at the named path."),
		e(manifest.CodeSchemaInvalid, "manifest", http.StatusBadRequest, "The manifest does not match schemas/manifest.v1.json.", "Fix the fields named in the message."),
		e(manifest.CodeLimitExceeded, "manifest", http.StatusBadRequest, "A list or string in the manifest is longer than the schema allows (at most 64 datasets, URIs of at most 512 characters; see schemas/manifest.v1.json). The bounds keep every accepted manifest decidable within the policy deadline.", "Split the run's data into fewer, larger datasets or shorten the named field; a retry of the same manifest fails the same way."),
		e(admission.CodeEntitlementInvalid, "entitlement", http.StatusForbidden, "The entitlement token does not verify (key, algorithm, type, issuer, audience, claims).", "Fetch a fresh entitlement from the canonical backend."),
		e(admission.CodeEntitlementExpired, "entitlement", http.StatusForbidden, "The entitlement token's exp has passed (also checked by policy).", "Fetch a fresh entitlement."),
		e(admission.CodeConfirmationNotFound, "confirmation", http.StatusForbidden, "No confirmation is deposited under the reference.", "Have the confirmation authority deposit it; use the ref it returns."),
		e(admission.CodeConfirmationInvalid, "confirmation", http.StatusForbidden, "The stored confirmation token does not verify, or the record disagrees with it.", "Ask the confirmation authority for a new confirmation."),
		e(admission.CodeConfirmationExpired, "confirmation", http.StatusForbidden, "The confirmation token has expired (also checked by policy).", "Ask for a new confirmation."),
		e(admission.CodeConfirmationDuplicate, "deposit", http.StatusConflict, "A confirmation with this jti was deposited before.", "Mint a new confirmation; a token is deposited once."),
		e(admission.CodeConfirmationReplayed, "confirmation", http.StatusForbidden, "The confirmation was already consumed by another admission (also a policy code).", "Each run needs its own confirmation."),
		e(admission.CodeRevokerUnauthenticated, "revocation", http.StatusUnauthorized, "POST /v1/revocations without a bearer token that verifies with trust.revokers (the entitlement issuer's revocation identity), or no revoker identity is configured.", "Revoke with the revoker identity; caller and depositor tokens are refused."),
		e(admission.CodeRevokerUnauthorized, "revocation", http.StatusForbidden, "The revoker identity asked to revoke a confirmation; only the confirmation authority does (POST /v1/confirmations/revocations).", "Have the confirmation authority revoke it."),
		e(admission.CodeCallerRevoked, "caller", http.StatusUnauthorized, "The caller's key id was withdrawn from trust by a revocation (kind caller_key), before its tokens expire.", "Get a token signed by a key still in trust; a revoked credential is never retried."),
		e(admission.CodeConfirmationRevoked, "confirmation", http.StatusForbidden, "The confirmation authority revoked this confirmation (by ref or jti) before use; checked at deposit, admission and commit.", "Ask the confirmation authority for a new confirmation."),
		e(admission.CodeEntitlementRevoked, "entitlement", http.StatusForbidden, "The entitlement issuer revoked this entitlement (by jti) or every entitlement of the booking; train.create is refused at admission and commit, teardown stays admissible.", "Fetch a new entitlement; a revoked booking admits no new run."),
		e(admission.CodeBookingFactsInvalid, "booking", http.StatusForbidden, "Go could not compute the run's GPUs, hours or price from the manifest and entitlement (whatever the bundle decided).", "Fix hardware, budget.max_wall_clock_hours and the entitlement's gpu, term and price."),
		e(admission.CodeRunPastTerm, "booking", http.StatusForbidden, "Go's own term check (also a policy code): the run's declared wall-clock end is after the booking term.", "Lower max_wall_clock_hours or extend the booking."),
		e(admission.CodeConfirmationCostBelowEstimate, "ledger", http.StatusForbidden, "The ledger refused to consume a confirmation whose cost_usd is below the run's estimated cost (also a policy code).", "Get a confirmation for at least the estimated cost."),
		e(admission.CodeBookingCapacityExceeded, "ledger", http.StatusForbidden, "Decided again in the commit transaction (also a policy code): the booking's live runs plus this run would hold more GPUs than booked. The message names the account's own live runs.", "Cancel or clean up a named run, or wait until one ends."),
		e(admission.CodeBookingReleased, "ledger", http.StatusForbidden, "The booking was released by a booking.release admission (also a policy code).", "Book again."),
		e(admission.CodeRunNotFound, "lifecycle", http.StatusForbidden, "train.cancel/cleanup/stage.advance/restart names a run this account was not admitted for on this booking.", "Use the run_id of your own admission."),
		e(admission.CodeRunNotLive, "lifecycle", http.StatusForbidden, "The ledger found the run cancelled or cleaned up when a stage advance or restart committed (also a policy code). Nothing was written.", "Create a new run."),
		e(admission.CodeStageConflict, "lifecycle", http.StatusConflict, "The run left the stage this train.stage.advance leaves before it committed (another advance won). Nothing was written; the confirmation stays usable.", "Read the run's stage and advance from there with a new eval report."),
		e(admission.CodeEvalReportInvalid, "evals", http.StatusForbidden, "An eval-authority token (eval report, ladder decision) does not verify with trust.evals (signature, issuer, audience, typ ito-eval+jwt, expiry), or no eval authority is configured.", "Send the token exactly as the eval authority signed it, before it expires; configure trust.evals."),
		e(admission.CodeIdempotencyConflict, "idempotency", http.StatusConflict, "The idempotency key is bound to a different request (also a policy code).", "Use a new key for a new request; query status before retrying."),
		e(admission.CodeAdmissionNotFound, "status", http.StatusNotFound, "No admission under this key for this account: nothing was admitted.", "Retry the admission with the same key."),
		e(admission.CodeLedgerUnavailable, "ledger", http.StatusServiceUnavailable, "The ledger could not be read or written; denied. Before the commit nothing was written; a fault during the commit leaves the outcome unknown (the message says so): query status first.", "Retry later; query status first."),
		e(admission.CodeOverloaded, "server", http.StatusServiceUnavailable, "Every policy evaluation slot was busy and the wait queue full, or the wait for a slot exceeded limits.max_queue_wait (limits.max_concurrent_evaluations). Nothing was evaluated, consumed or written.", "Retry after the Retry-After header with the same idempotency key; add replicas if it persists."),
		e(policy.CodeNotReady, "policy", http.StatusServiceUnavailable, "No verified policy bundle is active.", "Check the bundle configuration and /readyz."),
		e(policy.CodeBundleStale, "policy", http.StatusServiceUnavailable, "The active policy bundle is older than policy.bundle.max_age (counted from the built_at signed into its .manifest); it is no longer enforced and /readyz fails.", "Publish a newly built and signed bundle (make bundle); see bundles/README.md."),
		e(policy.CodeEvaluationFailed, "policy", http.StatusServiceUnavailable, "The policy raised an error.", "Check the bundle; the decision log has the decision id."),
		e(policy.CodeTimeout, "policy", http.StatusServiceUnavailable, "The evaluation exceeded policy.deadline.", "Check the bundle for expensive rules."),
		e(policy.CodeDecisionInvalid, "policy", http.StatusServiceUnavailable, "The decision is undefined or not {allow: bool, violations: [...]}, or allow disagrees with violations.", "Fix the bundle's data.ito.admission.decision."),
		e(admission.CodeTicketUnavailable, "ticket", http.StatusServiceUnavailable, "The policy allowed the train.create but its admission ticket could not be signed (tickets.signing_key); denied, nothing was consumed or written.", "Check the ticket key and the log (decision id); retry with the same idempotency key."),
		e(server.CodeTicketsDisabled, "ticket", http.StatusNotFound, "GET /v1/tickets/jwks on an itogate without a tickets section: it signs no tickets.", "Configure tickets (docs/tickets.md)."),
		e(webhook.CodeReviewInvalid, "workload", http.StatusBadRequest, "The Kubernetes webhook received something other than one admission.k8s.io/v1 AdmissionReview with a request (or an operation other than CREATE/UPDATE); the apiserver applies failurePolicy: Fail and refuses the object.", "Check the ValidatingWebhookConfiguration (deploy/kubernetes): admissionReviewVersions [v1], operations CREATE and UPDATE."),
		e(admission.CodeInternal, "server", http.StatusInternalServerError, "An unexpected fault; denied.", "Report it with the request id."),
	}
}

// FromPolicy reads every rule annotated with custom.code in the bundle's
// Rego modules (test files excluded).
func FromPolicy(bundle fs.FS) ([]Entry, error) {
	var out []Entry
	err := fs.WalkDir(bundle, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || path.Ext(p) != ".rego" || strings.HasSuffix(p, "_test.rego") {
			return nil
		}
		src, err := fs.ReadFile(bundle, p)
		if err != nil {
			return err
		}
		mod, err := ast.ParseModuleWithOpts(p, string(src), ast.ParserOptions{ProcessAnnotation: true, RegoVersion: ast.RegoV1})
		if err != nil {
			return err
		}
		for _, a := range mod.Annotations {
			code, _ := a.Custom["code"].(string)
			if code == "" {
				continue
			}
			gate, _ := a.Custom["gate"].(string)
			fix, _ := a.Custom["fix"].(string)
			level, _ := a.Custom["level"].(string)
			if level == "" {
				level = "deny"
			}
			meaning := a.Title
			if a.Description != "" {
				meaning = strings.TrimSpace(a.Title + ". " + a.Description)
			}
			out = append(out, Entry{Code: code, Gate: gate, Level: level, Status: http.StatusForbidden,
				Meaning: oneLine(meaning), Fix: oneLine(fix)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("codes: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Code < out[j].Code })
	return dedupe(out), nil
}

// dedupe keeps one entry per code. A code with a warn and a deny threshold
// (PP_BUBBLE_TOO_LARGE) has two annotated rules: its level reads "deny, warn"
// and the deny rule's text is kept.
func dedupe(es []Entry) []Entry {
	var out []Entry
	for _, e := range es {
		n := len(out)
		if n == 0 || out[n-1].Code != e.Code {
			out = append(out, e)
			continue
		}
		last := &out[n-1]
		if !strings.Contains(last.Level, e.Level) {
			levels := []string{last.Level, e.Level}
			sort.Strings(levels)
			last.Level = strings.Join(levels, ", ")
		}
		if e.Level == "deny" {
			last.Meaning, last.Fix = e.Meaning, e.Fix
		}
		if last.Fix == "" {
			last.Fix = e.Fix
		}
	}
	return out
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", "\\|")
}

// Markdown renders docs/codes.md.
func Markdown(policyCodes, goCodes []Entry) []byte {
	var b bytes.Buffer
	b.WriteString("# itogate codes\n\n")
	b.WriteString("Generated by `make codes` (`itogate codes`) from the policy METADATA and Go's code list;\n")
	b.WriteString("do not edit by hand. Codes are stable: once released a code keeps its name and meaning.\n\n")
	b.WriteString("## Policy codes\n\n")
	b.WriteString("A deny lists every violated rule in `error.violations[]`; warnings ride along in\n")
	b.WriteString("`data.warnings` (allow) or `error.warnings` (deny). Status 403, or 409 for\n")
	b.WriteString("`IDEMPOTENCY_KEY_CONFLICT`.\n\n")
	b.WriteString("| code | gate | level | meaning | typical fix |\n|---|---|---|---|---|\n")
	for _, e := range policyCodes {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", e.Code, e.Gate, e.Level, e.Meaning, e.Fix)
	}
	b.WriteString("\n## Codes from the pipeline (Go)\n\n")
	b.WriteString("Each step of the pipeline (docs/architecture.md §1) that fails answers with one of these in `error.code`.\n\n")
	b.WriteString("| code | step | HTTP | meaning | typical fix |\n|---|---|---|---|---|\n")
	for _, e := range goCodes {
		fmt.Fprintf(&b, "| `%s` | %s | %d | %s | %s |\n", e.Code, e.Gate, e.Status, oneLine(e.Meaning), oneLine(e.Fix))
	}
	return b.Bytes()
}
