package server

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"github.com/itocompute/itogate/gatekeeper/admission"
)

// Envelope is every response body (README, API). Exactly one of Data and Error
// is set.
type Envelope struct {
	OK bool `json:"ok"`
	// LiveAPIContacted is true only when itogate itself called a live backend
	// (the booking or billing API) while answering. itogate never does today:
	// every fact arrives signed in the request or sits in the ledger. The
	// field lets callers assert that a gate decision had no side effects.
	LiveAPIContacted bool       `json:"live_api_contacted"`
	Notice           string     `json:"notice"`
	Data             any        `json:"data,omitempty"`
	Error            *ErrorBody `json:"error,omitempty"`
}

// ErrorBody is the error part of an envelope. Message is always safe: no
// token, signature, key or credential bytes.
type ErrorBody struct {
	Code           string              `json:"code"`
	Message        string              `json:"message"`
	DecisionID     string              `json:"decision_id,omitempty"`
	BundleRevision string              `json:"bundle_revision,omitempty"`
	Violations     []admission.Finding `json:"violations,omitempty"`
	Warnings       []admission.Finding `json:"warnings,omitempty"`
	Estimates      map[string]any      `json:"estimates,omitempty"`
}

func envelopeOf(o admission.Outcome) Envelope {
	env := Envelope{OK: o.OK(), LiveAPIContacted: o.Live, Notice: o.Notice}
	if o.OK() {
		switch {
		case o.Data != nil:
			env.Data = o.Data
		case o.Extra != nil:
			env.Data = o.Extra
		default:
			env.Data = map[string]any{}
		}
		return env
	}
	eb := &ErrorBody{Code: o.Code, Message: o.Message, Violations: o.Violations}
	if o.Data != nil {
		eb.DecisionID = o.Data.DecisionID
		eb.BundleRevision = o.Data.BundleRevision
		eb.Warnings = o.Data.Warnings
		eb.Estimates = o.Data.Estimates
	}
	env.Error = eb
	return env
}

func writeOutcome(w http.ResponseWriter, o admission.Outcome) {
	if o.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(o.RetryAfter.Seconds()))))
	}
	writeJSON(w, o.Status, envelopeOf(o))
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeOutcome(w, admission.Outcome{Status: status, Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}
