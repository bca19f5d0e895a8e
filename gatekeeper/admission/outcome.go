package admission

import (
	"net/http"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// Outcome is the result of one admission, status lookup, deposit or
// revocation, ready for the HTTP edge to render. A zero Code means success.
// A failure's HTTP status is never chosen here: it is the code's, from the
// registry (HTTPStatus).
type Outcome struct {
	// Status is the status of a success (200, or 201 for something new
	// stored); unused on a failure.
	Status  int
	Code    api.Code // stable error code; empty on success
	Message string   // safe: never token, signature or key bytes
	Notice  string
	Data    *api.AdmissionData
	// Violations are every violated rule of a deny; the lead one (api.Lead)
	// is Code.
	Violations []api.Finding
	// Extra is route-specific success data (a deposit, a revocation).
	Extra any
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

// HTTPStatus is the status the outcome answers: a failure's is its code's
// (api.StatusOf), a success's is Status (default 200).
func (o Outcome) HTTPStatus() int {
	switch {
	case !o.OK():
		return api.StatusOf(o.Code)
	case o.Status == 0:
		return http.StatusOK
	}
	return o.Status
}

// Fail is a failure with code and a safe message; its status is the code's.
func Fail(code api.Code, msg string) Outcome { return Outcome{Code: code, Message: msg} }

// fail and denied are Fail (the status comes from the code either way).
func fail(code api.Code, msg string) Outcome { return Fail(code, msg) }

func denied(code api.Code, msg string) Outcome { return Fail(code, msg) }

// deny is a deny with every violation: the lead one (api.Lead: a key bound
// to another request leads, else the first) names the code and message.
func deny(prefix string, violations []api.Finding, data *api.AdmissionData) Outcome {
	lead, _ := api.Lead(violations)
	return Outcome{Code: lead.Code, Message: prefix + lead.Message, Data: data, Violations: violations}
}
