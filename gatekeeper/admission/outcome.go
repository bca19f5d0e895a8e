package admission

import (
	"net/http"
	"time"

	"github.com/itocompute/itogate/gatekeeper/policy"
)

// State is the lifecycle state reported for an admission (data.state).
//
//	admitted          train.create allowed: the caller may create the run
//	cancel_admitted   train.cancel allowed
//	cleanup_admitted  train.cleanup allowed
//	release_admitted  booking.release allowed
//	denied            nothing was written; the confirmation stays usable
type State = string

// StateDenied is reported on every deny.
const StateDenied State = "denied"

// Data is the admission part of a response envelope.
type Data struct {
	Decision       string `json:"decision"` // "allow" or "deny"
	DecisionID     string `json:"decision_id"`
	Action         string `json:"action"`
	BookingID      string `json:"booking_id"`
	RunID          string `json:"run_id,omitempty"`
	ManifestDigest string `json:"manifest_digest,omitempty"`
	IdempotencyKey string `json:"idempotency_key"`
	State          State  `json:"state"`
	BundleRevision string `json:"bundle_revision,omitempty"`
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

// Finding is a violation or warning as the API reports it.
type Finding = policy.Finding

// Outcome is the result of one admission, status lookup or deposit, ready for
// the HTTP edge to render. A zero Code means success.
type Outcome struct {
	Status     int
	Code       string // stable error code; empty on success
	Message    string // safe: never token, signature or key bytes
	Notice     string
	Data       *Data
	Violations []Finding
	// Extra is route-specific success data (the deposit's ref).
	Extra map[string]any
	// RetryAfter, when positive, is sent as the Retry-After header (whole
	// seconds): the deny is transient (CodeOverloaded).
	RetryAfter time.Duration
	// Cause is the verification error behind a deny, for metrics; it is
	// never rendered.
	Cause error
	// Live is true only when itogate itself called a live backend while
	// answering. It never does today; the field exists in the envelope so
	// callers can rely on it (see README).
	Live bool
}

// OK reports success.
func (o Outcome) OK() bool { return o.Code == "" }

func fail(status int, code, msg string) Outcome {
	return Outcome{Status: status, Code: code, Message: msg}
}

func denied(code, msg string) Outcome { return fail(http.StatusForbidden, code, msg) }
