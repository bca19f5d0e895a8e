package api

// The wire types of the HTTP API (README, "API (v1)"). Member names are
// the contract: extend, never rename.

// AdmissionRequest is the body of POST /v1/admissions. Which members an
// action takes is its ActionSpec. On the wire Manifest is the standard
// base64 (RFC 4648 §4) of the exact manifest bytes, as encoding/json
// writes a []byte; in Go it holds the bytes themselves.
type AdmissionRequest struct {
	Action         Action `json:"action"`
	BookingID      string `json:"booking_id"`
	IdempotencyKey string `json:"idempotency_key"`
	// Manifest is the exact manifest bytes (train.create,
	// train.stage.advance); at most 1 MiB.
	Manifest []byte `json:"manifest,omitempty"`
	// ManifestSignature is the detached signature as cosign sign-blob
	// writes it (base64).
	ManifestSignature string `json:"manifest_signature,omitempty"`
	// EntitlementToken is the canonical backend's JWT; ConfirmationRef the
	// "cfr_…" reference its deposit returned.
	EntitlementToken string `json:"entitlement_token"`
	ConfirmationRef  string `json:"confirmation_ref"`
	// RunID names the run an action on a run acts on.
	RunID string `json:"run_id,omitempty"`
	// ReleasesBooking: a train.cleanup that also releases the booking.
	ReleasesBooking bool `json:"releases_booking,omitempty"`
	// Stage is the stage a train.stage.advance moves the run to.
	Stage string `json:"stage,omitempty"`
	// CheckpointStep is the step a train.restart restarts from (>= 0):
	// required for train.restart, 0 included, and absent (nil) for every
	// other action. A pointer, so that an explicit 0 is sent and told
	// apart from no step at all.
	CheckpointStep *int64 `json:"checkpoint_step,omitempty"`
	// EvalReports are eval-authority tokens (compact JWS), at most
	// MaxEvalReports: the eval report that ends a stage
	// (train.stage.advance), 150M-ladder decisions for custom datasets
	// (train.create).
	EvalReports []string `json:"eval_reports,omitempty"`
}

// Step is the request's checkpoint_step, 0 when absent.
func (r AdmissionRequest) Step() int64 {
	if r.CheckpointStep == nil {
		return 0
	}
	return *r.CheckpointStep
}

// MaxEvalReports bounds the eval-authority tokens of one request.
const MaxEvalReports = 16

// DepositRequest is the body of POST /v1/confirmations.
type DepositRequest struct {
	ConfirmationToken string `json:"confirmation_token"`
}

// Deposit is the data of a stored confirmation (201).
type Deposit struct {
	ConfirmationRef string `json:"confirmation_ref"`
	JTI             string `json:"jti"`
	Act             Action `json:"act"`
	// ExpiresAt is the token's exp, unix seconds.
	ExpiresAt int64 `json:"expires_at"`
}

// ConfirmationRevocationRequest is the body of POST
// /v1/confirmations/revocations: a ref (deposited) or a jti (deposited or
// not yet), not both.
type ConfirmationRevocationRequest struct {
	Ref string `json:"ref,omitempty"`
	JTI string `json:"jti,omitempty"`
	// ExpiresAt is the revoked token's exp, unix seconds (optional with
	// Ref: the stored token's).
	ExpiresAt int64  `json:"expires_at,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// TicketCheckRequest is the body of POST /v1/tickets/verify (a
// scheduler's online check).
type TicketCheckRequest struct {
	// Ticket is the compact JWS the job carries.
	Ticket string `json:"ticket"`
	// JobID, when set, binds the ticket's run to this scheduler job: the
	// first job id bound is the run's for good (TICKET_JOB_BOUND for
	// another); the same one again is answered alike. Its shape is
	// JobIDPattern.
	JobID string `json:"job_id,omitempty"`
}

// JobIDPattern is the shape of a scheduler job id (TicketCheckRequest.JobID):
// 1 to 128 characters of letters, digits, '_', '.', ':' and '-', the first a
// letter or digit (no id reads as a flag). '_' admits Slurm array tasks
// (4711_3) and Ray submission ids (raysubmit_…).
const JobIDPattern = `^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`

// TicketCheck is the data of a live answer of POST /v1/tickets/verify.
type TicketCheck struct {
	// Live is true: the ticket verifies and its run may take work now
	// (the ledger's RunRecord.MayWork). Anything else is an error with
	// the run state's code.
	Live      bool     `json:"live"`
	State     RunState `json:"state"`
	RunID     string   `json:"run_id"`
	BookingID string   `json:"booking_id"`
	Account   string   `json:"account"`
	JTI       string   `json:"jti"`
	ExpiresAt int64    `json:"expires_at"`
	// GPUs is what the run holds of its booking now (the ledger's run
	// record): the ticket's world_size, or more once a stage advance grew
	// the run into a larger stage (a renewed ticket carries it). A
	// scheduler caps the job's GPUs at it.
	GPUs int `json:"gpus"`
	// JobID and JobBoundAt: the run's job, when a job id was given.
	JobID      string `json:"job_id,omitempty"`
	JobBoundAt int64  `json:"job_bound_at,omitempty"`
}

// TicketRenewal is the data of POST /v1/runs/{run_id}/ticket: a fresh
// ticket of the run (the claims of its first, a new jti, iat and exp, and
// the topology the run holds now: world_size and nodes grown by a stage
// advance into a larger stage).
type TicketRenewal struct {
	RunID     string `json:"run_id"`
	Ticket    string `json:"ticket"`
	JTI       string `json:"jti"`
	ExpiresAt int64  `json:"expires_at"`
}

// RevocationRequest is the body of POST /v1/revocations.
type RevocationRequest struct {
	// Kind is entitlement, booking or caller_key.
	Kind string `json:"kind"`
	// Subject is the entitlement's jti, the booking id or the key id.
	Subject string `json:"subject"`
	// ExpiresAt is the revoked token's exp, unix seconds.
	ExpiresAt int64  `json:"expires_at"`
	Reason    string `json:"reason,omitempty"`
}

// Revoked is the data of a stored revocation (201 new, 200 already
// stored).
type Revoked struct {
	Kind      string `json:"kind"`
	Subject   string `json:"subject"`
	RevokedBy string `json:"revoked_by"`
	// RevokedAt and ExpiresAt are unix seconds.
	RevokedAt int64 `json:"revoked_at"`
	ExpiresAt int64 `json:"expires_at"`
	Created   bool  `json:"created"`
}

// Envelope is every response body: exactly one of Data and Error is set.
// D is the data's type (any when writing).
type Envelope[D any] struct {
	OK bool `json:"ok"`
	// LiveAPIContacted is true only when itogate itself called a live
	// backend (the booking or billing API) while answering. itogate never
	// does: every fact arrives signed in the request or sits in the
	// ledger. The field lets callers assert that a decision had no side
	// effect outside the ledger.
	LiveAPIContacted bool       `json:"live_api_contacted"`
	Notice           string     `json:"notice"`
	Data             D          `json:"data,omitempty"`
	Error            *ErrorBody `json:"error,omitempty"`
}

// ErrorBody is the error part of an envelope. Message is always safe: no
// token, signature, key or credential bytes.
type ErrorBody struct {
	Code           Code           `json:"code"`
	Message        string         `json:"message"`
	DecisionID     string         `json:"decision_id,omitempty"`
	BundleRevision string         `json:"bundle_revision,omitempty"`
	Violations     []Finding      `json:"violations,omitempty"`
	Warnings       []Finding      `json:"warnings,omitempty"`
	Estimates      map[string]any `json:"estimates,omitempty"`
}

// Finding is one violation or warning, as the policy reports it.
type Finding struct {
	Code    Code   `json:"code"`
	Gate    string `json:"gate"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// AdmissionData is the admission part of a response: the data of an allow
// and of a status lookup; on a deny its ids ride in the error body.
type AdmissionData struct {
	Decision       string         `json:"decision"` // "allow" or "deny"
	DecisionID     string         `json:"decision_id"`
	Action         Action         `json:"action"`
	BookingID      string         `json:"booking_id"`
	RunID          string         `json:"run_id,omitempty"`
	ManifestDigest string         `json:"manifest_digest,omitempty"`
	IdempotencyKey string         `json:"idempotency_key"`
	State          AdmissionState `json:"state"`
	BundleRevision string         `json:"bundle_revision,omitempty"`
	// GPUs is, for train.create, the GPUs the run holds of its booking (its
	// world size) and LiveUntil (unix seconds) when it stops holding them at
	// the latest (declared wall-clock end + grace); absent otherwise.
	GPUs      int            `json:"gpus,omitempty"`
	LiveUntil int64          `json:"live_until,omitempty"`
	Warnings  []Finding      `json:"warnings,omitempty"`
	Estimates map[string]any `json:"estimates,omitempty"`
	// Ticket is the admission ticket of an allowed train.create (compact
	// JWS, docs/tickets.md): the same on a replay and a status lookup.
	Ticket string `json:"ticket,omitempty"`
	// RunState is, on a status lookup of an admission on a run, the run's
	// state now (GET /v1/runs/{run_id} has the rest).
	RunState RunState `json:"run_state,omitempty"`
}

// RunStatus is the data of GET /v1/runs/{run_id} and each entry of GET
// /v1/runs: a run as the ledger has it, for the account that was admitted
// for it. Times are unix seconds.
type RunStatus struct {
	RunID     string `json:"run_id"`
	BookingID string `json:"booking_id"`
	// State is the run's state now (the ledger's RunRecord.State).
	State          RunState `json:"state"`
	Stage          string   `json:"stage,omitempty"`
	ManifestDigest string   `json:"manifest_digest"`
	// GPUs the run holds of its booking while it is not ended (a halted or
	// revoked run holds them until a teardown), from AdmittedAt until
	// LiveUntil at the latest: its world size, grown to a larger stage's by
	// the stage advance that entered it (never shrunk; Events say when).
	GPUs       int   `json:"gpus"`
	AdmittedAt int64 `json:"admitted_at"`
	LiveUntil  int64 `json:"live_until"`
	// EndedAt and EndedBy: the admission that ended the run, if one did.
	EndedAt int64  `json:"ended_at,omitempty"`
	EndedBy Action `json:"ended_by,omitempty"`
	// Restarts and LastCheckpointStep: its train.restart admissions so far
	// and the step of the latest (each step is in Events), present (0
	// included) once there is one.
	Restarts           int    `json:"restarts"`
	LastCheckpointStep *int64 `json:"last_checkpoint_step,omitempty"`
	// Checkpoint is the checkpoint plan its train.create recorded.
	Checkpoint *RunCheckpoint `json:"checkpoint,omitempty"`
	// Halt and Revocation: what stopped a halted or revoked run.
	Halt       *RunHalt       `json:"halt,omitempty"`
	Revocation *RunRevocation `json:"revocation,omitempty"`
	// ReportDue is when the eval report of the run's current stage is due
	// (unix seconds; absent: the stage has no report deadline); Report the
	// passing report the eval authority posted for the stage, if any.
	// ReportOverdue: the deadline passed without one, so the run is halted
	// (EVAL_REPORT_OVERDUE) though no failed gate halted it (no Halt).
	ReportDue     int64      `json:"report_due,omitempty"`
	Report        *RunReport `json:"report,omitempty"`
	ReportOverdue bool       `json:"report_overdue,omitempty"`
	// Events are the run's transitions, oldest first, with the decision id
	// of every admission on it (GET /v1/runs/{run_id} only).
	Events []RunEvent `json:"events,omitempty"`
}

// RunCheckpoint is a run's checkpoint plan.
type RunCheckpoint struct {
	IntervalSteps         int64 `json:"interval_steps"`
	Steps                 int64 `json:"steps"`
	WallClockSeconds      int64 `json:"wall_clock_seconds"`
	LostSecondsPerRestart int64 `json:"lost_seconds_per_restart"`
}

// RunHalt is the failed eval gate that halted a run.
type RunHalt struct {
	At           int64    `json:"at"`
	Stage        string   `json:"stage"`
	FailedEvals  []string `json:"failed_evals"`
	ReportDigest string   `json:"report_digest"`
	DecisionID   string   `json:"decision_id"`
}

// RunReport is a passing eval report recorded for a run's current stage.
type RunReport struct {
	At           int64  `json:"at"`
	Stage        string `json:"stage"`
	ReportDigest string `json:"report_digest"`
	DecisionID   string `json:"decision_id"`
}

// EvalReportRequest is the body of POST /v1/runs/{run_id}/eval-reports: the
// eval authority's report for the run, posted directly. The report is the
// post's credential: no bearer token is read.
type EvalReportRequest struct {
	// EvalReport is the eval authority's eval report (compact JWS, typ
	// ito-eval+jwt, kind eval_report), verified with trust.evals as on a
	// stage advance.
	EvalReport string `json:"eval_report"`
	// Manifest is the run's exact manifest bytes (base64 on the wire, as in
	// AdmissionRequest; at most 1 MiB): its digest must be the run's, and
	// the eval gates it declares for the stage are judged with the bundle's
	// battery. Its signature was verified at train.create and is not
	// asked again.
	Manifest []byte `json:"manifest"`
}

// EvalReportResult is the data of a posted eval report (201 when it halted
// the run or recorded the stage's passing report, 200 when the same report
// had done so before: the same answer).
type EvalReportResult struct {
	RunID string `json:"run_id"`
	// Stage is the stage the report judged; Verdict "failed" (the run is
	// halted) or "passed" (the stage's report is recorded).
	Stage   string `json:"stage"`
	Verdict string `json:"verdict"`
	// FailedEvals are the evals that failed or had no result (failed).
	FailedEvals  []string `json:"failed_evals,omitempty"`
	ReportDigest string   `json:"report_digest"`
	// State is the run's state after the post.
	State RunState `json:"state"`
	// DecisionID and RecordedAt are the post's that recorded the halt or the
	// report (the first post's on a repeat).
	DecisionID string `json:"decision_id"`
	RecordedAt int64  `json:"recorded_at"`
	// Created is false for a repeat that changed nothing.
	Created        bool   `json:"created"`
	BundleRevision string `json:"bundle_revision"`
}

// RunRevocation is the revocation that revoked a run.
type RunRevocation struct {
	At      int64  `json:"at"`
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Reason  string `json:"reason,omitempty"`
}

// RunEvent is one transition of a run.
type RunEvent struct {
	At int64 `json:"at"`
	// To is the state it moved the run to; "" when it changed nothing.
	To         RunState `json:"to,omitempty"`
	Action     Action   `json:"action,omitempty"`
	DecisionID string   `json:"decision_id,omitempty"`
	Reason     string   `json:"reason,omitempty"`
	Stage      string   `json:"stage,omitempty"`
	// CheckpointStep is the step a train.restart restarted from, present
	// (0 included) on its events only.
	CheckpointStep *int64 `json:"checkpoint_step,omitempty"`
	// GPUs is what the run holds from this event on when the event set it:
	// its train.create's world size, or the larger stage's a stage advance
	// grew it to; absent on every other event.
	GPUs int `json:"gpus,omitempty"`
}

// RunList is the data of GET /v1/runs: a page of the caller account's runs
// in the order they were admitted, and the cursor of the next page (its
// `after` parameter), absent on the last page. A page filtered by state
// may hold fewer runs than the limit, even none, and still have a next.
type RunList struct {
	Runs []RunStatus `json:"runs"`
	Next string      `json:"next,omitempty"`
}

// DefaultRunPage and MaxRunPage bound GET /v1/runs's limit.
const (
	DefaultRunPage = 50
	MaxRunPage     = 200
)

// PlanRequest is the body of POST /v1/plans: the layouts the policy would
// admit for a manifest on the caller's booking. Manifest and
// ManifestSignature are as in AdmissionRequest (the signature is verified
// like an admission's); EntitlementToken binds the booking to the caller's
// account. Nothing is consumed and no confirmation is needed.
type PlanRequest struct {
	BookingID         string `json:"booking_id"`
	Manifest          []byte `json:"manifest"`
	ManifestSignature string `json:"manifest_signature"`
	EntitlementToken  string `json:"entitlement_token"`
}
