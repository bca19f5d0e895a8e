package api

import (
	"net/http"
	"slices"
)

// Code is a stable error code: UPPER_SNAKE, never renamed or reused once
// released. The codes Go produces are the constants below, each in the
// registry with its one HTTP status; policy codes are the bundle's.
type Code string

// Level says how a code reaches the caller.
type Level string

const (
	// LevelDeny: a policy rule that refuses (403 unless the precedence rule
	// of DenyStatus says otherwise).
	LevelDeny Level = "deny"
	// LevelWarn: a policy advisory; never refuses.
	LevelWarn Level = "warn"
	// LevelError: a code Go produces before or after the policy.
	LevelError Level = "error"
)

// Producer is who answers a code.
type Producer string

const (
	// ProducedByServer: the HTTP API (POST/GET /v1/…), in error.code.
	ProducedByServer Producer = "server"
	// ProducedByWebhook: the Kubernetes webhook, leading status.message of
	// its AdmissionReview response (or its plain HTTP error).
	ProducedByWebhook Producer = "webhook"
	// ProducedByClient: itogate train/status themselves, in the envelope
	// they print for a refusal they make without an answer from itogate.
	ProducedByClient Producer = "client"
	// ProducedByCluster: the ValidatingAdmissionPolicies of
	// deploy/kubernetes, evaluated by the kube-apiserver itself (no call to
	// itogate, so they hold while itogate is down), leading their message.
	ProducedByCluster Producer = "cluster"
)

// Entry is one code's registry entry.
type Entry struct {
	Code Code
	// Gate is the policy gate, or for Go codes the pipeline step.
	Gate  string
	Level Level
	// Status is the HTTP status of a response carrying the code; 0 for a
	// client-side code (no HTTP answer exists).
	Status int
	// Producers answer the code.
	Producers []Producer
	Meaning   string
	Fix       string
}

// Codes produced in Go, in pipeline order. Each is in Registry() with one
// status; a test fails when a constant is missing there or produced nowhere.
const (
	// The request, before anything is verified.
	CodeRequestTooLarge   Code = "REQUEST_TOO_LARGE"
	CodeRequestTimeout    Code = "REQUEST_TIMEOUT"
	CodeContentType       Code = "REQUEST_CONTENT_TYPE_UNSUPPORTED"
	CodeRequestInvalid    Code = "REQUEST_INVALID"
	CodeRouteNotFound     Code = "ROUTE_NOT_FOUND"
	CodeMethodNotAllowed  Code = "METHOD_NOT_ALLOWED"
	CodeNotReady          Code = "NOT_READY"
	CodeOverloaded        Code = "ADMISSION_OVERLOADED"
	CodeTicketsDisabled   Code = "TICKETS_DISABLED"
	CodeAdmissionNotFound Code = "ADMISSION_NOT_FOUND"
	CodeRunStatusNotFound Code = "RUN_STATUS_NOT_FOUND"

	// Bearer identities.
	CodeCallerUnauthenticated    Code = "CALLER_UNAUTHENTICATED"
	CodeCallerRevoked            Code = "CALLER_REVOKED"
	CodeDepositorUnauthorized    Code = "DEPOSITOR_UNAUTHENTICATED"
	CodeRevokerUnauthenticated   Code = "REVOKER_UNAUTHENTICATED"
	CodeRevokerUnauthorized      Code = "REVOKER_UNAUTHORIZED"
	CodeRevocationRefNotFound    Code = "REVOCATION_REF_NOT_FOUND"
	CodeSchedulerUnauthenticated Code = "SCHEDULER_UNAUTHENTICATED"
	CodeEvalReportUnauthorized   Code = "EVAL_REPORT_UNAUTHENTICATED"

	// The manifest, on the server and (path, file) in the CLI's safe reader.
	CodeManifestRequired      Code = "MANIFEST_REQUIRED"
	CodeManifestEncoding      Code = "MANIFEST_ENCODING_INVALID"
	CodeManifestTooLarge      Code = "MANIFEST_TOO_LARGE"
	CodeManifestSignature     Code = "MANIFEST_SIGNATURE_INVALID"
	CodeManifestMalformed     Code = "MANIFEST_MALFORMED"
	CodeManifestSchemaInvalid Code = "MANIFEST_SCHEMA_INVALID"
	CodeManifestLimitExceeded Code = "MANIFEST_LIMIT_EXCEEDED"
	CodeManifestPathInvalid   Code = "MANIFEST_PATH_INVALID"
	CodeManifestNotFound      Code = "MANIFEST_NOT_FOUND"
	CodeManifestPathSymlink   Code = "MANIFEST_PATH_SYMLINK"
	CodeManifestNotRegular    Code = "MANIFEST_NOT_REGULAR"
	CodeManifestPermissions   Code = "MANIFEST_PERMISSIONS"
	CodeManifestOwner         Code = "MANIFEST_OWNER"
	CodeManifestUnreadable    Code = "MANIFEST_UNREADABLE"

	// Tokens.
	CodeEntitlementInvalid    Code = "ENTITLEMENT_INVALID"
	CodeEntitlementExpired    Code = "ENTITLEMENT_EXPIRED"
	CodeEntitlementStale      Code = "ENTITLEMENT_STALE"
	CodeEntitlementRevoked    Code = "ENTITLEMENT_REVOKED"
	CodeConfirmationNotFound  Code = "CONFIRMATION_NOT_FOUND"
	CodeConfirmationInvalid   Code = "CONFIRMATION_INVALID"
	CodeConfirmationExpired   Code = "CONFIRMATION_EXPIRED"
	CodeConfirmationDuplicate Code = "CONFIRMATION_DUPLICATE"
	CodeConfirmationReplayed  Code = "CONFIRMATION_REPLAYED"
	CodeConfirmationRevoked   Code = "CONFIRMATION_REVOKED"
	CodeEvalReportInvalid     Code = "EVAL_REPORT_INVALID"
	CodeEvalReportMismatch    Code = "EVAL_REPORT_BINDING_MISMATCH"

	// The booking, the run and the ledger.
	CodeBookingFactsInvalid           Code = "BOOKING_FACTS_INVALID"
	CodeRunPastTerm                   Code = "BUDGET_RUN_PAST_TERM"
	CodeConfirmationCostBelowEstimate Code = "CONFIRMATION_COST_BELOW_ESTIMATE"
	CodeBookingCapacityExceeded       Code = "BOOKING_CAPACITY_EXCEEDED"
	CodeStageWorldSizeExceedsRun      Code = "STAGE_WORLD_SIZE_EXCEEDS_RUN"
	CodeBookingReleased               Code = "BOOKING_RELEASED"
	CodeCheckpointCapacityExceeded    Code = "CHECKPOINT_CAPACITY_EXCEEDED"
	CodeBookingAccountMismatch        Code = "BOOKING_ACCOUNT_MISMATCH"
	CodeRunNotFound                   Code = "RUN_NOT_FOUND"
	CodeRunNotLive                    Code = "RUN_NOT_LIVE"
	CodeRunHalted                     Code = "RUN_HALTED"
	CodeEvalReportOverdue             Code = "EVAL_REPORT_OVERDUE"
	CodeRunManifestMismatch           Code = "RUN_MANIFEST_MISMATCH"
	CodeRestartStepOffPlan            Code = "RESTART_STEP_OFF_PLAN"
	CodeRestartBudgetExceeded         Code = "RESTART_BUDGET_EXCEEDED"
	CodeStageConflict                 Code = "RUN_STAGE_CONFLICT"
	CodeIdempotencyConflict           Code = "IDEMPOTENCY_KEY_CONFLICT"
	CodeLedgerUnavailable             Code = "LEDGER_UNAVAILABLE"
	CodeDecisionLogUnavailable        Code = "DECISION_LOG_UNAVAILABLE"

	// The policy.
	CodePolicyNotReady         Code = "POLICY_NOT_READY"
	CodePolicyBundleStale      Code = "POLICY_BUNDLE_STALE"
	CodePolicyEvaluationFailed Code = "POLICY_EVALUATION_FAILED"
	CodePolicyTimeout          Code = "POLICY_TIMEOUT"
	CodePolicyDecisionInvalid  Code = "POLICY_DECISION_INVALID"
	CodePolicyFactsMismatch    Code = "POLICY_FACTS_VERSION_MISMATCH"

	// Tickets and the workload boundary.
	CodeTicketUnavailable     Code = "TICKET_UNAVAILABLE"
	CodeReviewInvalid         Code = "WORKLOAD_REVIEW_INVALID"
	CodeWorkloadTicketBound   Code = "WORKLOAD_TICKET_BOUND"
	CodeWorkloadOwnerUnbound  Code = "WORKLOAD_OWNER_UNBOUND"
	CodeWorkloadRunNotFound   Code = "WORKLOAD_RUN_NOT_FOUND"
	CodeTicketInvalid         Code = "TICKET_INVALID"
	CodeTicketExpired         Code = "TICKET_EXPIRED"
	CodeTicketJobBound        Code = "TICKET_JOB_BOUND"
	CodeWorkloadRunNotLive    Code = "WORKLOAD_RUN_NOT_LIVE"
	CodeWorkloadOwnerRetired  Code = "WORKLOAD_OWNER_RETIRED"
	CodeWorkloadGPUsExceedRun Code = "WORKLOAD_GPUS_EXCEED_RUN"
	// Refused by the kube-apiserver's ValidatingAdmissionPolicies
	// (deploy/kubernetes/base/admissionpolicies.yaml).
	CodeWorkloadOrphaningDelete           Code = "WORKLOAD_ORPHANING_DELETE"
	CodeNamespaceLabelGuarded             Code = "NAMESPACE_LABEL_GUARDED"
	CodeWorkloadPodMetadataGuarded        Code = "WORKLOAD_POD_METADATA_GUARDED"
	CodeWorkloadGPUTolerationUncontrolled Code = "WORKLOAD_GPU_TOLERATION_UNCONTROLLED"
	CodeWorkloadDeleteGraceTooLong        Code = "WORKLOAD_DELETE_GRACE_TOO_LONG"
	CodeWorkloadDeviceAnnotationGuarded   Code = "WORKLOAD_DEVICE_ANNOTATION_GUARDED"

	// The client's own refusals (itogate train, itogate status).
	CodeClientInput     Code = "CLIENT_INPUT_INVALID"
	CodeClientTransport Code = "CLIENT_TRANSPORT_FAILED"
	CodeClientTimeout   Code = "CLIENT_TIMEOUT"
	CodeClientResponse  Code = "CLIENT_RESPONSE_INVALID"

	CodeInternal Code = "INTERNAL_ERROR"
)

// StatusOf is the HTTP status a response carrying code answers: the
// registry's, or 403 for a code only the policy produces (a policy deny).
// It is the one place a status is chosen for a code.
func StatusOf(code Code) int {
	if e, ok := registryIndex[code]; ok && e.Status != 0 {
		return e.Status
	}
	return http.StatusForbidden
}

// Lookup returns the registry entry of a Go-produced code.
func Lookup(code Code) (Entry, bool) {
	e, ok := registryIndex[code]
	return e, ok
}

// Registry returns every code Go produces, in pipeline order.
func Registry() []Entry {
	out := make([]Entry, len(registry))
	for i, e := range registry {
		e.Producers = slices.Clone(e.Producers)
		out[i] = e
	}
	return out
}

// Lead picks the code that leads a deny with several violations, written
// once: a key bound to another request (IDEMPOTENCY_KEY_CONFLICT, 409)
// leads, else the first violation (403). Every violation stays listed; the
// answer's status is StatusOf(Lead(...)). ok is false for no violations.
func Lead(violations []Finding) (lead Finding, ok bool) {
	if len(violations) == 0 {
		return Finding{}, false
	}
	for _, v := range violations {
		if v.Code == CodeIdempotencyConflict {
			return v, true
		}
	}
	return violations[0], true
}

var registryIndex = func() map[Code]Entry {
	m := make(map[Code]Entry, len(registry))
	for _, e := range registry {
		if _, dup := m[e.Code]; dup {
			panic("api: code registered twice: " + string(e.Code))
		}
		m[e.Code] = e
	}
	return m
}()

var (
	server        = []Producer{ProducedByServer}
	webhook       = []Producer{ProducedByWebhook}
	cluster       = []Producer{ProducedByCluster}
	client        = []Producer{ProducedByClient}
	serverWebhook = []Producer{ProducedByServer, ProducedByWebhook}
)

func entry(code Code, step string, status int, by []Producer, meaning, fix string) Entry {
	return Entry{Code: code, Gate: step, Level: LevelError, Status: status, Producers: by, Meaning: meaning, Fix: fix}
}

// registry is the one list of Go-produced codes, in pipeline order.
var registry = []Entry{
	entry(CodeRequestTooLarge, "request", http.StatusRequestEntityTooLarge, serverWebhook,
		"The request body exceeds limits.max_body_bytes (the webhook: an AdmissionReview above webhook.max_review_bytes, "+
			"denied with that reason when its first bytes name the request's uid).",
		"Send a manifest of at most 1 MiB; for a workload object, shrink it or raise webhook.max_review_bytes."),
	entry(CodeRequestTimeout, "request", http.StatusRequestTimeout, server,
		"The request body did not arrive within limits.request_timeout.",
		"Send the whole body promptly; check the network path to itogate, then retry with the same idempotency key."),
	entry(CodeContentType, "request", http.StatusUnsupportedMediaType, serverWebhook,
		"Content-Type is not application/json, or the body is compressed.",
		"Send application/json (UTF-8), uncompressed."),
	entry(CodeRequestInvalid, "request", http.StatusBadRequest, server,
		"The body is not one strict JSON object of the documented fields (duplicate or case-variant keys, unknown fields, wrong types, bad ids).",
		"Fix the named field."),
	entry(CodeRouteNotFound, "request", http.StatusNotFound, server,
		"No route has this path.", "Check the path against the API (README)."),
	entry(CodeMethodNotAllowed, "request", http.StatusMethodNotAllowed, serverWebhook,
		"The route exists but not for this method (the webhook takes POST only).",
		"Use the method the API names for the route."),
	entry(CodeNotReady, "server", http.StatusServiceUnavailable, server,
		"GET /readyz: no verified policy bundle is active, the ledger does not answer, or (production) the decision log cannot be written; the message says which.",
		"Check the bundle configuration, the ledger and the decision log's disk; /readyz turns ready by itself."),
	entry(CodeOverloaded, "server", http.StatusServiceUnavailable, server,
		"Every policy evaluation slot was busy and the wait queue full, or the wait for a slot exceeded limits.max_queue_wait (limits.max_concurrent_evaluations). Nothing was evaluated, consumed or written.",
		"Retry after the Retry-After header with the same idempotency key; add replicas if it persists."),
	entry(CodeTicketsDisabled, "ticket", http.StatusNotFound, server,
		"GET /v1/tickets/jwks on an itogate without a tickets section: it signs no tickets.",
		"Configure tickets (docs/tickets.md)."),
	entry(CodeAdmissionNotFound, "status", http.StatusNotFound, server,
		"No admission under this key for this account: nothing was admitted.",
		"Retry the admission with the same key."),

	entry(CodeRunStatusNotFound, "status", http.StatusNotFound, server,
		"GET /v1/runs/{run_id} or POST /v1/runs/{run_id}/ticket: no run with this id was admitted for this account (another account's run answers alike); POST /v1/runs/{run_id}/eval-reports: no run with this id was admitted at all.",
		"Use the run_id of your own train.create admission; GET /v1/runs lists your runs. The eval authority posts for the run_id its report names."),

	entry(CodeCallerUnauthenticated, "caller", http.StatusUnauthorized, server,
		"No bearer token, or it does not verify with the callers' key set, issuer and audience.",
		"Send a current token from the configured identity provider."),
	entry(CodeCallerRevoked, "caller", http.StatusUnauthorized, server,
		"The caller's key id was withdrawn from trust by a revocation (kind caller_key), before its tokens expire.",
		"Get a token signed by a key still in trust; a revoked credential is never retried."),
	entry(CodeDepositorUnauthorized, "deposit", http.StatusUnauthorized, server,
		"The confirmation authority's bearer token does not verify with the depositors' key set.",
		"Deposit with the authority's own identity; caller tokens are refused."),
	entry(CodeRevokerUnauthenticated, "revocation", http.StatusUnauthorized, server,
		"POST /v1/revocations without a bearer token that verifies with trust.revokers (the entitlement issuer's revocation identity), or no revoker identity is configured.",
		"Revoke with the revoker identity; caller and depositor tokens are refused."),
	entry(CodeRevokerUnauthorized, "revocation", http.StatusForbidden, server,
		"The identity may not revoke this kind: confirmations are revoked by the confirmation authority (POST /v1/confirmations/revocations), entitlements, bookings and caller keys by the revoker identity (POST /v1/revocations).",
		"Revoke with the identity the kind requires."),
	entry(CodeSchedulerUnauthenticated, "ticket", http.StatusUnauthorized, server,
		"POST /v1/tickets/verify without a bearer token that verifies with trust.schedulers (the schedulers' identity), or no scheduler identity is configured.",
		"Call with the scheduler identity (a Slurm prolog's or Ray job submitter's token); caller, depositor and revoker tokens are refused."),
	entry(CodeEvalReportUnauthorized, "evals", http.StatusUnauthorized, server,
		"POST /v1/runs/{run_id}/eval-reports: the eval report, the post's only credential, does not verify with trust.evals (signature, key, algorithm, typ ito-eval+jwt, issuer, audience, expiry; a caller, depositor, revoker, scheduler or any other purpose's key never does), or no eval authority is configured. Nothing was judged or written.",
		"Post the report exactly as the eval authority signed it, before it expires; configure trust.evals."),
	entry(CodeRevocationRefNotFound, "revocation", http.StatusNotFound, server,
		"POST /v1/confirmations/revocations names a ref under which no confirmation is deposited.",
		"Revoke by the ref the deposit returned, or by the token's jti (also before it is deposited)."),

	entry(CodeManifestRequired, "manifest", http.StatusBadRequest, server,
		"train.create or train.stage.advance without manifest bytes.", "Send the manifest, base64-encoded."),
	entry(CodeManifestEncoding, "manifest", http.StatusBadRequest, server,
		"The manifest field is not standard base64.", "Encode the exact bytes with RFC 4648 §4 base64."),
	entry(CodeManifestTooLarge, "manifest", http.StatusRequestEntityTooLarge, []Producer{ProducedByServer, ProducedByClient},
		"The manifest is larger than 1 MiB (the CLI refuses it before sending; so does every file the CLI reads past its limit).",
		"Move bulky parts (data lists) behind references."),
	entry(CodeManifestSignature, "manifest", http.StatusForbidden, server,
		"The detached signature does not verify over the exact manifest bytes with any pinned signer key.",
		"Re-sign the bytes you send (itogate sign or cosign sign-blob --key)."),
	entry(CodeManifestMalformed, "manifest", http.StatusBadRequest, server,
		"The manifest is not strict JSON (duplicate or case-variant keys, invalid UTF-8, deep nesting, trailing data).",
		"Fix the JSON at the named path."),
	entry(CodeManifestSchemaInvalid, "manifest", http.StatusBadRequest, server,
		"The manifest does not match schemas/manifest.v1.json.", "Fix the fields named in the message."),
	entry(CodeManifestLimitExceeded, "manifest", http.StatusBadRequest, server,
		"A list or string in the manifest is longer than the schema allows (at most 64 datasets, URIs of at most 512 characters; see schemas/manifest.v1.json). The bounds keep every accepted manifest decidable within the policy deadline.",
		"Split the run's data into fewer, larger datasets or shorten the named field; a retry of the same manifest fails the same way."),
	entry(CodeManifestPathInvalid, "file", 0, client,
		"The CLI's safe file reader refused the path by its form: empty, a NUL byte, or one that names a directory (trailing slash, final . or ..).",
		"Name the file itself."),
	entry(CodeManifestNotFound, "file", 0, client,
		"A component of the path does not exist or is not a directory.", "Check the path."),
	entry(CodeManifestPathSymlink, "file", 0, client,
		"A component of the path, the last included, is a symbolic link; the CLI follows none.",
		"Name the real file (realpath), not a link to it."),
	entry(CodeManifestNotRegular, "file", 0, client,
		"The file is a directory, FIFO, socket or device: the CLI refuses it at once instead of blocking on it.",
		"Name a regular file."),
	entry(CodeManifestPermissions, "file", 0, client,
		"The file is group- or world-writable, or a directory on the path is world-writable without the sticky bit: another user could change it between the check and the use.",
		"chmod go-w the file (and the directory)."),
	entry(CodeManifestOwner, "file", 0, client,
		"The file is owned by neither you nor root.", "Copy it to a file you own."),
	entry(CodeManifestUnreadable, "file", 0, client,
		"Any other failure to open, stat or read the file (permission denied, I/O error, unsupported platform).", "Check the file's permissions."),

	entry(CodeEntitlementInvalid, "entitlement", http.StatusForbidden, server,
		"The entitlement token does not verify (key, algorithm, type, issuer, audience, claims).",
		"Fetch a fresh entitlement from the canonical backend."),
	entry(CodeEntitlementExpired, "entitlement", http.StatusForbidden, server,
		"The entitlement token's exp has passed (also checked by policy).", "Fetch a fresh entitlement."),
	entry(CodeEntitlementStale, "entitlement", http.StatusForbidden, server,
		"Answered by Go for an entitlement issued further in the future than the clock leeway (the policy's freshness code, same boundary).",
		"Check the issuer's and itogate's clocks; fetch a fresh entitlement."),
	entry(CodeEntitlementRevoked, "entitlement", http.StatusForbidden, server,
		"The entitlement issuer revoked this entitlement (by jti) or every entitlement of the booking. The revocation reaches the runs: a run admitted under the entitlement, or on the booking, is revoked with it (a transition recorded on the run), so train.create, train.stage.advance, train.restart and new workloads of such a run (the webhook) are refused at admission and again at commit; train.cancel, train.cleanup and booking.release stay admissible.",
		"Fetch a new entitlement; a revoked booking admits no new run, and a revoked run can only be cancelled or cleaned up."),
	entry(CodeConfirmationNotFound, "confirmation", http.StatusForbidden, server,
		"No confirmation is deposited under the reference.",
		"Have the confirmation authority deposit it; use the ref it returns."),
	entry(CodeConfirmationInvalid, "confirmation", http.StatusForbidden, server,
		"The confirmation token does not verify (at deposit or at use), or the record disagrees with it.",
		"Ask the confirmation authority for a new confirmation."),
	entry(CodeConfirmationExpired, "confirmation", http.StatusForbidden, server,
		"The confirmation token has expired (also checked by policy).", "Ask for a new confirmation."),
	entry(CodeConfirmationDuplicate, "deposit", http.StatusConflict, server,
		"A confirmation with this jti was deposited before.", "Mint a new confirmation; a token is deposited once."),
	entry(CodeConfirmationReplayed, "confirmation", http.StatusForbidden, server,
		"The confirmation was already consumed by another admission (also a policy code).",
		"Each run needs its own confirmation."),
	entry(CodeConfirmationRevoked, "confirmation", http.StatusForbidden, server,
		"The confirmation authority revoked this confirmation (by ref or jti) before use; checked at deposit, admission and commit, answered alike at each.",
		"Ask the confirmation authority for a new confirmation."),
	entry(CodeEvalReportInvalid, "evals", http.StatusForbidden, server,
		"An eval-authority token (eval report, ladder decision) does not verify with trust.evals (signature, issuer, audience, typ ito-eval+jwt, expiry), or no eval authority is configured.",
		"Send the token exactly as the eval authority signed it, before it expires; configure trust.evals."),
	entry(CodeEvalReportMismatch, "lifecycle", http.StatusForbidden, server,
		"POST /v1/runs/{run_id}/eval-reports (also a policy code, for a stage advance): the verified token is not an eval report (kind) or is not bound to the path's run, the run's current stage, its manifest digest or the stage's battery (the message names the field). Nothing was judged or written.",
		"Post the eval report of the run's current stage, battery and manifest."),

	entry(CodeBookingFactsInvalid, "booking", http.StatusForbidden, server,
		"Go could not compute the run's GPUs, hours or price from the manifest and entitlement (whatever the bundle decided).",
		"Fix hardware, budget.max_wall_clock_hours and the entitlement's gpu, term and price."),
	entry(CodeRunPastTerm, "booking", http.StatusForbidden, server,
		"Go's own term check (also a policy code): the run's declared wall-clock end is after the booking term.",
		"Lower max_wall_clock_hours or extend the booking."),
	entry(CodeConfirmationCostBelowEstimate, "ledger", http.StatusForbidden, server,
		"The ledger refused to consume a confirmation whose cost_usd is below the run's estimated cost (also a policy code).",
		"Get a confirmation for at least the estimated cost."),
	entry(CodeBookingCapacityExceeded, "ledger", http.StatusForbidden, server,
		"Decided again in the commit transaction (also a policy code): the booking's live runs plus this run would hold more GPUs than booked. The message names the account's own live runs.",
		"Cancel or clean up a named run, or wait until one ends."),
	entry(CodeStageWorldSizeExceedsRun, "ledger", http.StatusForbidden, server,
		"Decided again in the commit transaction (also a policy code): a train.stage.advance into a stage larger than the GPUs its run holds grows the run only if the booking's other live runs plus the stage's world size stay within the booking's GPUs; serialized with every train.create on the booking, so a grow and a create never both take the last GPUs. The message names the stage's GPUs, the run's and the free GPUs. Nothing was written or consumed; the run keeps its GPUs and stage.",
		"Cancel or clean up another run of the booking, or wait until one ends, then send the same advance again; or give the stage fewer nodes."),
	entry(CodeCheckpointCapacityExceeded, "ledger", http.StatusForbidden, server,
		"Decided again in the commit transaction (also a policy code): the checkpoints the booking's live runs keep plus this run's would exceed the booking's checkpoint storage quota. Nothing was written or consumed.",
		"Lower checkpoint.retention, cancel or clean up a run that keeps checkpoints, or get a larger quota."),
	entry(CodeBookingReleased, "ledger", http.StatusForbidden, server,
		"The booking was released by a booking.release admission (also a policy code).", "Book again."),
	entry(CodeBookingAccountMismatch, "booking", http.StatusForbidden, server,
		"The booking id is bound to another account: a booking belongs to the account of its first admission (the entitlement's account), and every action naming it (create, release, capacity, usage) is refused for any other account. Nothing was written or consumed; the other account's runs are untouched.",
		"Use a booking id of your own account (the canonical backend's entitlement names it)."),
	entry(CodeRunNotFound, "lifecycle", http.StatusForbidden, server,
		"train.cancel/cleanup/stage.advance/restart names a run this account was not admitted for on this booking.",
		"Use the run_id of your own admission."),
	entry(CodeRunNotLive, "lifecycle", http.StatusForbidden, server,
		"The run is not live (cancelled, cleaned up, released or past its declared end) for a stage advance or restart, found so by the policy or again by the ledger at commit (also a policy code). Nothing was written.",
		"Create a new run."),
	entry(CodeRunHalted, "lifecycle", http.StatusForbidden, server,
		"A signed eval report failed the gate of the run's stage and halted the run (also a policy code): it gets no stage advance, no restart and no new workload; the message names the failed evals. Only train.cancel and train.cleanup are admitted. Nothing was written; the confirmation stays usable.",
		"Cancel or clean up the run; a failed eval gate has no override. Create a new run to train again."),
	entry(CodeEvalReportOverdue, "lifecycle", http.StatusForbidden, server,
		"The run's stage has a report deadline (bundle data: batteries.<stage>.report_deadline_seconds, recorded on the run when it entered the stage) that passed without a passing eval report from the eval authority (POST /v1/runs/{run_id}/eval-reports): the run counts as halted, so it gets no stage advance, no restart, no ticket renewal, no job and no new workload (the webhook's WORKLOAD_RUN_HALTED names this code); the message names the overdue stage. Only train.cancel and train.cleanup are admitted. Nothing was written.",
		"Cancel or clean up the run; a report arriving after the deadline is refused. Create a new run, and have the eval authority post each stage's report before its deadline."),
	entry(CodeRunManifestMismatch, "lifecycle", http.StatusForbidden, server,
		"POST /v1/runs/{run_id}/eval-reports (also a policy code, for a stage advance): the manifest sent is not the one the run was admitted with (its digest differs). Nothing was judged or written.",
		"Send the exact manifest bytes the run was created with."),
	entry(CodeRestartStepOffPlan, "lifecycle", http.StatusForbidden, server,
		"train.restart names a checkpoint step the run's checkpoint plan never writes (also a policy code): a restart starts from a positive multiple of checkpoint.interval_steps within the run's steps, as recorded on the run at train.create. Nothing was written; the confirmation stays usable.",
		"Restart from a step the run checkpointed; the message names the interval and the run's steps."),
	entry(CodeRestartBudgetExceeded, "lifecycle", http.StatusForbidden, server,
		"The run has had as many restarts as its budget allows (also a policy code): the budget is bundle data (data.ito.config.lifecycle.restarts), priced with the checkpoint gate's lost-work estimate against the run's wall clock; the message names the figures. Checked again inside the commit, so racing restarts cannot pass it. Nothing was written.",
		"Cancel the run and investigate its failures; create a new run with a checkpoint plan that loses less work per restart."),
	entry(CodeStageConflict, "lifecycle", http.StatusConflict, server,
		"The run left the stage this train.stage.advance leaves before it committed (another advance won). Nothing was written; the confirmation stays usable.",
		"Read the run's stage and advance from there with a new eval report."),
	entry(CodeIdempotencyConflict, "idempotency", http.StatusConflict, server,
		"The idempotency key is bound to a different request (also a policy code); it leads a deny with several violations.",
		"Use a new key for a new request; query status before retrying."),
	entry(CodeLedgerUnavailable, "ledger", http.StatusServiceUnavailable, serverWebhook,
		"The ledger could not be read or written; denied. Before the commit nothing was written; a fault during the commit leaves the outcome unknown (the message says so): query status first.",
		"Retry later; query status first."),
	entry(CodeDecisionLogUnavailable, "ledger", http.StatusServiceUnavailable, server,
		"The policy allowed, but the decision log could not be written (a full disk, an unwritable file): in production no allow is committed without its write-ahead line, so this one was denied and nothing was consumed or stored. /readyz fails until the log can be written again.",
		"Retry later; the operator frees space or fixes the decision log file (the server log says why)."),

	entry(CodePolicyNotReady, "policy", http.StatusServiceUnavailable, serverWebhook,
		"No verified policy bundle is active.", "Check the bundle configuration and /readyz."),
	entry(CodePolicyBundleStale, "policy", http.StatusServiceUnavailable, serverWebhook,
		"The active policy bundle is older than policy.bundle.max_age (counted from the built_at signed into its .manifest); it is no longer enforced and /readyz fails.",
		"Publish a newly built and signed bundle (make bundle); see bundles/README.md."),
	entry(CodePolicyEvaluationFailed, "policy", http.StatusServiceUnavailable, serverWebhook,
		"The policy raised an error.", "Check the bundle; the decision log has the decision id."),
	entry(CodePolicyTimeout, "policy", http.StatusServiceUnavailable, serverWebhook,
		"The evaluation exceeded policy.deadline.", "Check the bundle for expensive rules."),
	entry(CodePolicyDecisionInvalid, "policy", http.StatusServiceUnavailable, serverWebhook,
		"The decision is undefined or not {allow: bool, violations: [...]}, or allow disagrees with violations.",
		"Fix the bundle's data.ito.admission.decision."),
	entry(CodePolicyFactsMismatch, "policy", http.StatusServiceUnavailable, server,
		"The policy input's training facts (input.facts) are not of the facts-model version the active bundle expects (data.ito.config.facts.model_version): they were computed for another bundle. Denied without evaluating.",
		"Retry: the facts are computed again with the active bundle. Persisting, check that the bundle and this itogate agree on the facts model (docs/policy-input.md)."),

	entry(CodeTicketUnavailable, "ticket", http.StatusServiceUnavailable, server,
		"The policy allowed the train.create but its admission ticket could not be signed (tickets.signing_key); denied, nothing was consumed or written.",
		"Check the ticket key and the log (decision id); retry with the same idempotency key."),
	entry(CodeReviewInvalid, "workload", http.StatusBadRequest, webhook,
		"The Kubernetes webhook received something other than one admission.k8s.io/v1 AdmissionReview with a request, or an operation other than CREATE/UPDATE; the apiserver applies failurePolicy: Fail and refuses the object.",
		"Check the ValidatingWebhookConfiguration (deploy/kubernetes): admissionReviewVersions [v1], operations CREATE and UPDATE."),
	entry(CodeTicketInvalid, "ticket", http.StatusForbidden, server,
		"POST /v1/tickets/verify: the ticket does not verify (signature, key, typ, issuer, audience, claims) or was not issued for train.create.",
		"Refuse the job; use the ticket exactly as itogate returned it (data.ticket, or its renewal)."),
	entry(CodeTicketExpired, "ticket", http.StatusForbidden, server,
		"POST /v1/tickets/verify: the ticket is at or past its exp (no leeway: the offline window is at most tickets.lifetime). Tickets live minutes (tickets.lifetime); the holder renews them while the run may run.",
		"Renew the ticket (POST /v1/runs/{run_id}/ticket, itogate ticket renew) and submit the job with the new one."),
	entry(CodeTicketJobBound, "ticket", http.StatusForbidden, server,
		"POST /v1/tickets/verify with a job_id: the run's tickets already started another scheduler job (another job id, or the same id from another scheduler identity), or its ticket already created a Kubernetes workload (the message names it); one ticket, one job. Nothing was written.",
		"Refuse the job; admit a new run for another job. A retried prolog of the same job is answered live."),
	entry(CodeWorkloadTicketBound, "workload", http.StatusForbidden, webhook,
		"The ledger refused the bind (also a policy code): the ticket already created another workload, or its run's tickets already started a scheduler job outside Kubernetes (the message names it).",
		"Admit a new run for a second workload."),
	entry(CodeWorkloadOwnerUnbound, "workload", http.StatusForbidden, webhook,
		"The ledger refused the bind (also a policy code): the object's controller is not the workload this ticket created.",
		"Create the workload from its own ticket."),
	entry(CodeWorkloadRunNotFound, "workload", http.StatusForbidden, webhook,
		"The ledger has no run for the ticket at bind time (also a policy code).",
		"Use the ticket of an admitted run."),
	entry(CodeWorkloadRunNotLive, "workload", http.StatusForbidden, webhook,
		"The ledger refused the bind (also a policy code): the run was halted, revoked or ended after the webhook read it (RunRecord.MayWork, re-checked in the bind's transaction).",
		"Admit a new run; a halted, revoked or ended run creates nothing."),
	entry(CodeWorkloadOwnerRetired, "workload", http.StatusForbidden, webhook,
		"The ledger refused the bind: the object's controller descends from a root object that a re-created object of the same name replaced (it was deleted); the deleted object's uid admits no children.",
		"Nothing to do for the deleted object's children; the re-created object's controller creates its own."),
	entry(CodeWorkloadGPUsExceedRun, "workload", http.StatusForbidden, webhook,
		"The ledger refused the bind: the children of one controller (a JobSet's Jobs, a RayJob's or RayService's RayClusters) run at once and are charged together, and this child's GPUs (what the policy counted for it) plus those its controller's other recorded children hold exceed the GPUs the run holds (RunRecord.GPUs, as stage advances grew it), decided in the bind's transaction. The webhook never sees deletes: a child's charge stays until the run ends, unless a child of the same name re-created replaces it. A RayService's zero-downtime upgrade, which creates a second RayCluster while the first runs, is refused this way. Nothing was written; the children already admitted run on.",
		"Give the run GPUs for every child that runs at once: admit a run for both clusters of a RayService upgrade (or advance into a larger stage). Or delete the old child first: a child re-created under its name takes its charge over (a JobSet's Jobs after a restart), and a workload deleted and re-created (a RayService with spec.upgradeStrategy.type None, re-created to change its cluster) is charged afresh."),
	entry(CodeWorkloadOrphaningDelete, "workload", http.StatusForbidden, cluster,
		"The apiserver's ValidatingAdmissionPolicy itogate-workload-delete refused a DELETE of an object carrying itogate.io/ticket that would orphan its dependents (propagationPolicy Orphan, orphanDependents true, or, without a propagation policy, an object carrying the orphan finalizer or a batch/v1 Job, which the apiserver orphans by default), or the orphan finalizer on a ticketed object at CREATE or by an UPDATE, or a jobs/status write that changes or removes a Job's ticket annotation (a status write takes new metadata; without the ticket an orphaning delete would no longer be refused): orphaned Pods would keep their GPUs while a re-created object of the same name runs new ones on the same ticket.",
		"Delete with propagationPolicy Background or Foreground (kubectl delete does: --cascade=background); leave the orphan finalizer off a ticketed object."),
	entry(CodeNamespaceLabelGuarded, "workload", http.StatusForbidden, cluster,
		"The apiserver's ValidatingAdmissionPolicy itogate-namespace-labels refused a namespace CREATE or UPDATE by someone other than a named cluster admin that sets, changes or removes a guarded label: itogate.io/*, resource.kubernetes.io/admin-access, pod-security.kubernetes.io/*.",
		"Ask a cluster admin (system:masters or the group itogate:namespace-admins) to change the label."),
	entry(CodeWorkloadPodMetadataGuarded, "workload", http.StatusForbidden, cluster,
		"The apiserver's ValidatingAdmissionPolicy itogate-ticketed-pods refused an UPDATE of a Pod carrying itogate.io/ticket, or of its pods/status (a status write takes new labels and annotations), that changes its labels, ownerReferences or ticket annotation, by someone other than a workload controller the bundle lists (data.ito.config.workload.controllers.users) or a cluster admin: a relabelled Pod is released by its controller, which starts a replacement on the same ticket while the released Pod keeps its GPUs.",
		"Leave a ticketed Pod's labels and ownerReferences to its controller; to stop it, delete it or its workload. A cluster admin (system:masters or the group itogate:namespace-admins) may change them."),
	entry(CodeWorkloadGPUTolerationUncontrolled, "workload", http.StatusForbidden, cluster,
		"The apiserver's ValidatingAdmissionPolicy itogate-gpu-tolerations refused a Pod, or a built-in workload's Pod template, that tolerates the GPU nodes' taint (gpuNodeTaint.keys; by default nvidia.com/gpu, amd.com/gpu) or every taint, in a namespace not under itogate's control (itogate.io/enforce not true, warn or exempt; not a system namespace): the webhook does not review that namespace, and the taint is what keeps its Pods off GPU nodes.",
		"Run GPU workloads in a controlled namespace, with a ticket; or drop the toleration. A namespace that runs GPU node agents is labelled itogate.io/enforce=exempt by a cluster admin."),
	entry(CodeWorkloadDeleteGraceTooLong, "workload", http.StatusForbidden, cluster,
		"The apiserver's ValidatingAdmissionPolicy itogate-pod-deletion refused, in a namespace with itogate.io/enforce=true and from someone other than a cluster admin, a DELETE of a Pod carrying itogate.io/ticket, or an eviction of any Pod, whose gracePeriodSeconds is above the bundle's max_termination_grace_seconds (a DELETE also above the Pod's own terminationGracePeriodSeconds): the deleted Pod would keep its GPUs that long while its controller starts a replacement on the same ticket.",
		"Delete or evict without gracePeriodSeconds (the Pod's own terminationGracePeriodSeconds, which the webhook bounds) or with one at or below the bound."),
	entry(CodeWorkloadDeviceAnnotationGuarded, "workload", http.StatusForbidden, cluster,
		"The apiserver's ValidatingAdmissionPolicy itogate-pod-device-annotations refused, in a namespace with itogate.io/enforce=true and from someone other than a cluster admin, an UPDATE of a Pod (ticketed or not), or of its pods/status, that adds a device-injecting annotation (CDI, NRI, CRI-O: a key the bundle's device_annotation_keys lists, a key under a device_annotation_prefixes entry, or the entry without its trailing slash) or changes its value: the kubelet and NRI plugins read a Pod's annotations again when its sandbox is re-created, and would give the running Pod devices the scheduler never counted. Removing one is allowed.",
		"Put device annotations in the Pod (or its workload's pod template) at creation, where the webhook judges them; a Pod holding a whole node by its ticket may carry them. A cluster admin (system:masters or the group itogate:namespace-admins) may change them."),

	entry(CodeClientInput, "client", 0, client,
		"A client command (itogate train, status, runs, revoke) refused a flag or file before sending anything.",
		"Fix the named flag."),
	entry(CodeClientTransport, "client", 0, client,
		"No answer from itogate: the connection failed or broke (train: and the status lookup gave no definite answer).",
		"train: ask itogate status with the same key, then retry; runs: ask again; revoke: send it again (it is idempotent)."),
	entry(CodeClientTimeout, "client", 0, client,
		"--timeout passed before a definite answer.",
		"train: ask itogate status with the same key, then retry; runs: ask again; revoke: send it again (it is idempotent)."),
	entry(CodeClientResponse, "client", 0, client,
		"itogate answered with something that is not an envelope (a proxy's error page, a truncated body).",
		"Check --server and the path to itogate."),

	entry(CodeInternal, "server", http.StatusInternalServerError, serverWebhook,
		"An unexpected fault (a recovered panic, an unusable schema); denied.", "Report it with the request id."),
}
