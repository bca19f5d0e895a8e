package server

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"github.com/itocompute/itogate/gatekeeper/admission"
	"github.com/itocompute/itogate/gatekeeper/api"
)

// Envelope is every response body (api.Envelope).
type Envelope = api.Envelope[any]

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
	eb := &api.ErrorBody{Code: o.Code, Message: o.Message, Violations: o.Violations}
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
	writeJSON(w, o.HTTPStatus(), envelopeOf(o))
}

// writeError answers a coded error; its status is the code's (api.StatusOf).
func writeError(w http.ResponseWriter, code api.Code, msg string) {
	writeOutcome(w, admission.Fail(code, msg))
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
