package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
)

func TestActions(t *testing.T) {
	type props struct {
		effect                                     api.Effect
		state                                      api.AdmissionState
		run, manifest, teardown, stage, step, eval bool
	}
	want := map[api.Action]props{
		api.TrainCreate:       {api.EffectCreateRun, api.StateAdmitted, false, true, false, false, false, true},
		api.TrainStageAdvance: {api.EffectStepRun, api.StateStageAdvanced, true, true, false, true, false, true},
		api.TrainRestart:      {api.EffectStepRun, api.StateRestartAdmitted, true, false, false, false, true, false},
		api.TrainCancel:       {api.EffectEndRun, api.StateCancelAdmitted, true, false, true, false, false, false},
		api.TrainCleanup:      {api.EffectEndRun, api.StateCleanupAdmitted, true, false, true, false, false, false},
		api.BookingRelease:    {api.EffectReleaseBooking, api.StateReleaseAdmitted, false, false, true, false, false, false},
	}
	if got := len(api.Actions()); got != len(want) {
		t.Fatalf("%d actions, want %d", got, len(want))
	}
	states := map[api.AdmissionState]bool{}
	for _, s := range api.Actions() {
		w, ok := want[s.Action]
		if !ok {
			t.Fatalf("unexpected action %q", s.Action)
		}
		a := s.Action
		got := props{a.Effect(), s.State, a.ActsOnRun(), a.CarriesManifest(), a.Teardown(), s.Stage, s.CheckpointStep, s.EvalReports}
		if got != w || !a.Valid() || !s.State.Stored() || states[s.State] {
			t.Errorf("%s: %+v (valid %v, stored %v, state reused %v), want %+v", a, got, a.Valid(), s.State.Stored(), states[s.State], w)
		}
		states[s.State] = true
	}
	if spec, _ := api.TrainCleanup.Spec(); !spec.ReleasesBooking {
		t.Error("train.cleanup may release the booking")
	}
	// The state an allow leaves its run in: live for what creates or steps
	// it, an end for a teardown.
	for _, s := range api.Actions() {
		want := map[api.Action]api.RunState{api.TrainCreate: api.RunLive, api.TrainStageAdvance: api.RunLive,
			api.TrainRestart: api.RunLive, api.TrainCancel: api.RunCancelled, api.TrainCleanup: api.RunCleanedUp,
			api.BookingRelease: api.RunReleased}[s.Action]
		if s.RunState != want || s.RunState.Ended() != s.Action.Teardown() {
			t.Errorf("%s leaves its run %q (ended %v), want %q", s.Action, s.RunState, s.RunState.Ended(), want)
		}
	}
	if got := len(api.RunStates()); got != 7 || api.RunStates()[0] != api.RunLive || !api.RunExpired.Ended() ||
		api.RunHalted.Ended() || api.RunRevoked.Ended() {
		t.Errorf("RunStates() = %v", api.RunStates())
	}
	for _, a := range []api.Action{"", "train", "TRAIN.CREATE", "train.create "} {
		if a.Valid() || a.Effect() != 0 || a.ActsOnRun() || a.CarriesManifest() || a.Teardown() {
			t.Errorf("%q reads as an action", a)
		}
	}
	for _, s := range []api.AdmissionState{api.StateDenied, "", "allowed", "ADMITTED"} {
		if s.Stored() {
			t.Errorf("%q is a stored state", s)
		}
	}
	if got, want := api.ActionNames(), "train.create, train.stage.advance, train.restart, train.cancel, train.cleanup or booking.release"; got != want {
		t.Errorf("ActionNames() = %q, want %q", got, want)
	}
	if got := api.ActionsWhere(func(s api.ActionSpec) bool { return s.Stage }); got != "train.stage.advance" {
		t.Errorf("ActionsWhere(stage) = %q", got)
	}
	if got := api.ActionsWhere(func(api.ActionSpec) bool { return false }); got != "no action" {
		t.Errorf("ActionsWhere(none) = %q", got)
	}
	for e, name := range map[api.Effect]string{api.EffectCreateRun: "create_run", api.EffectStepRun: "step_run",
		api.EffectEndRun: "end_run", api.EffectReleaseBooking: "release_booking", 0: "none"} {
		if e.String() != name {
			t.Errorf("Effect(%d).String() = %q, want %q", e, e.String(), name)
		}
	}
}

func TestStatusOf(t *testing.T) {
	for code, want := range map[api.Code]int{
		api.CodeRequestInvalid:        http.StatusBadRequest,
		api.CodeCallerUnauthenticated: http.StatusUnauthorized,
		api.CodeConfirmationRevoked:   http.StatusForbidden,
		api.CodeIdempotencyConflict:   http.StatusConflict,
		api.CodeStageConflict:         http.StatusConflict,
		api.CodeAdmissionNotFound:     http.StatusNotFound,
		api.CodeMethodNotAllowed:      http.StatusMethodNotAllowed,
		api.CodeRequestTimeout:        http.StatusRequestTimeout,
		api.CodeRequestTooLarge:       http.StatusRequestEntityTooLarge,
		api.CodeContentType:           http.StatusUnsupportedMediaType,
		api.CodeInternal:              http.StatusInternalServerError,
		api.CodeLedgerUnavailable:     http.StatusServiceUnavailable,
		"BUDGET_CEILING_EXCEEDED":     http.StatusForbidden, // a policy-only code: a policy deny
		api.CodeClientTimeout:         http.StatusForbidden, // client-side: no status of its own
	} {
		if got := api.StatusOf(code); got != want {
			t.Errorf("StatusOf(%s) = %d, want %d", code, got, want)
		}
	}
	for _, e := range api.Registry() {
		clientOnly := len(e.Producers) == 1 && e.Producers[0] == api.ProducedByClient
		if (e.Status == 0) != clientOnly || e.Level != api.LevelError || e.Meaning == "" || e.Fix == "" || e.Gate == "" {
			t.Errorf("registry entry %+v", e)
		}
		if got, ok := api.Lookup(e.Code); !ok || got.Code != e.Code {
			t.Errorf("Lookup(%s) = %+v, %v", e.Code, got, ok)
		}
	}
	if _, ok := api.Lookup("BUDGET_CEILING_EXCEEDED"); ok {
		t.Error("a policy-only code is in the Go registry")
	}
	// Registry returns a copy: a caller cannot change the registry.
	r := api.Registry()
	r[0].Status, r[0].Producers[0] = 999, "x"
	if e := api.Registry()[0]; e.Status == 999 || e.Producers[0] == "x" {
		t.Error("Registry() shares its entries")
	}
}

func TestLead(t *testing.T) {
	f := func(c api.Code) api.Finding { return api.Finding{Code: c, Gate: "g", Message: string(c)} }
	for name, tc := range map[string]struct {
		in     []api.Finding
		want   api.Code
		status int
	}{
		"first violation":          {[]api.Finding{f("B_CODE"), f("A_CODE")}, "B_CODE", 403},
		"key conflict leads (409)": {[]api.Finding{f("B_CODE"), f(api.CodeIdempotencyConflict), f("A_CODE")}, api.CodeIdempotencyConflict, 409},
		"single":                   {[]api.Finding{f(api.CodeConfirmationReplayed)}, api.CodeConfirmationReplayed, 403},
	} {
		lead, ok := api.Lead(tc.in)
		if !ok || lead.Code != tc.want || api.StatusOf(lead.Code) != tc.status {
			t.Errorf("%s: Lead = %+v %v (status %d), want %s %d", name, lead, ok, api.StatusOf(lead.Code), tc.want, tc.status)
		}
	}
	if _, ok := api.Lead(nil); ok {
		t.Error("Lead(nil) found a lead")
	}
}

// TestAdmissionRequestWire: the Go type marshals to the documented member
// names, the manifest as standard base64 of its bytes, optional members
// omitted.
func TestAdmissionRequestWire(t *testing.T) {
	b, err := json.Marshal(api.AdmissionRequest{Action: api.TrainCreate, BookingID: "bk", IdempotencyKey: "k",
		Manifest: []byte{0xfb, 0xff}, ManifestSignature: "sig", EntitlementToken: "e", ConfirmationRef: "cfr"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"action":"train.create","booking_id":"bk","idempotency_key":"k","manifest":"+/8=","manifest_signature":"sig",` +
		`"entitlement_token":"e","confirmation_ref":"cfr"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(api.AdmissionRequest{Action: api.TrainRestart, RunID: "run_1", CheckpointStep: new(int64(500))})
	want = `{"action":"train.restart","booking_id":"","idempotency_key":"","entitlement_token":"","confirmation_ref":"",` +
		`"run_id":"run_1","checkpoint_step":500}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	// A restart from step 0 sends 0: an explicit 0 is not an absent step.
	b, _ = json.Marshal(api.AdmissionRequest{Action: api.TrainRestart, RunID: "run_1", CheckpointStep: new(int64(0))})
	want = `{"action":"train.restart","booking_id":"","idempotency_key":"","entitlement_token":"","confirmation_ref":"",` +
		`"run_id":"run_1","checkpoint_step":0}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	var back api.AdmissionRequest
	if err := json.Unmarshal(b, &back); err != nil || back.CheckpointStep == nil || *back.CheckpointStep != 0 || back.Step() != 0 {
		t.Errorf("step 0 round trip: %v, %v", back.CheckpointStep, err)
	}
	var absent api.AdmissionRequest
	if err := json.Unmarshal([]byte(`{"action":"train.restart"}`), &absent); err != nil || absent.CheckpointStep != nil || absent.Step() != 0 {
		t.Errorf("absent step: %v, %v", absent.CheckpointStep, err)
	}
}
