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
	// CheckpointStep is the step a train.restart restarts from (>= 0).
	CheckpointStep int64 `json:"checkpoint_step,omitempty"`
	// EvalReports are eval-authority tokens (compact JWS), at most
	// MaxEvalReports: the eval report that ends a stage
	// (train.stage.advance), 150M-ladder decisions for custom datasets
	// (train.create).
	EvalReports []string `json:"eval_reports,omitempty"`
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
}
