package api

import "strings"

// Action is what an admission asks for, e.g. "train.create". It is the
// confirmation token's act claim, the request's action field and the ledger
// record's action.
type Action string

// The actions, in the order of a run's life.
const (
	// TrainCreate admits a new run on a booking: it carries the manifest and
	// the run holds its GPUs from the admission until an action ends it or
	// its declared end (plus grace) passes.
	TrainCreate Action = "train.create"
	// TrainStageAdvance moves a live run to the next stage its manifest
	// declares, with the eval authority's report of the stage it leaves.
	TrainStageAdvance Action = "train.stage.advance"
	// TrainRestart restarts a live run from a checkpoint step.
	TrainRestart Action = "train.restart"
	// TrainCancel ends a run early.
	TrainCancel Action = "train.cancel"
	// TrainCleanup ends a run after it finished and frees its resources; it
	// never releases the booking unless the request says releases_booking.
	TrainCleanup Action = "train.cleanup"
	// BookingRelease releases the booking: it ends every live run on it and
	// admits no new one.
	BookingRelease Action = "booking.release"
)

// Effect is what an allowed action does to the run's life in the ledger.
// The ledger stores implement effects, not actions: an action with an
// existing effect needs no ledger change.
type Effect uint8

const (
	// EffectCreateRun writes a new run record that holds the run's GPUs of
	// its booking, if they fit beside the booking's live runs.
	EffectCreateRun Effect = iota + 1
	// EffectStepRun acts on a live run without ending it (its stage may
	// move); the ledger refuses it once the run is not live.
	EffectStepRun
	// EffectEndRun ends the run it names (teardown): it stops holding GPUs.
	EffectEndRun
	// EffectReleaseBooking releases the booking and ends its live runs
	// (teardown).
	EffectReleaseBooking
)

// String names the effect ("create_run", "step_run", "end_run",
// "release_booking"), as the PostgreSQL store's commit statement reads it.
func (e Effect) String() string {
	switch e {
	case EffectCreateRun:
		return "create_run"
	case EffectStepRun:
		return "step_run"
	case EffectEndRun:
		return "end_run"
	case EffectReleaseBooking:
		return "release_booking"
	}
	return "none"
}

// RunState is where a run is in its life, as the ledger records it
// (ledger.RunRecord.State): the state input.ledger.run.state hands to the
// policy and the answer every enforcement point reads through one
// predicate (ledger.RunRecord.May). A run starts live; halted and revoked
// stop it from taking new work but keep it until a teardown; the others
// are ends.
type RunState string

// The run states (docs/architecture.md §3, "A run's life").
const (
	// RunLive: admitted by train.create and in its recorded stage (moved by
	// each train.stage.advance; a train.restart keeps it). It may advance,
	// restart and get new workloads.
	RunLive RunState = "live"
	// RunHalted: a signed eval report failed the gate of its stage
	// (a halt transition). Only train.cancel and train.cleanup are admitted.
	RunHalted RunState = "halted"
	// RunRevoked: its booking, or the entitlement it was admitted under, was
	// revoked while it was live. Only train.cancel and train.cleanup are
	// admitted.
	RunRevoked RunState = "revoked"
	// RunCancelled, RunCleanedUp and RunReleased: ended by a train.cancel,
	// a train.cleanup or a booking.release admission.
	RunCancelled RunState = "cancelled"
	RunCleanedUp RunState = "cleaned_up"
	RunReleased  RunState = "released"
	// RunExpired: its declared wall-clock end plus grace passed.
	RunExpired RunState = "expired"
)

// RunStates lists every run state, live first.
func RunStates() []RunState {
	return []RunState{RunLive, RunHalted, RunRevoked, RunCancelled, RunCleanedUp, RunReleased, RunExpired}
}

// Ended reports whether s is an end: nothing but another end's no-op
// follows it.
func (s RunState) Ended() bool {
	switch s {
	case RunCancelled, RunCleanedUp, RunReleased, RunExpired:
		return true
	}
	return false
}

// AdmissionState is what an allowed admission permits the caller to do
// next: the data.state of an admission response and the state stored with
// it. A deny reports StateDenied and stores nothing.
type AdmissionState string

// The admission states, one per action, and the deny's.
const (
	// StateAdmitted: train.create was allowed; the caller may create the
	// run (a new run id).
	StateAdmitted AdmissionState = "admitted"
	// StateStageAdvanced: train.stage.advance of the run from its stage to
	// the next was allowed and recorded.
	StateStageAdvanced AdmissionState = "stage_advanced"
	// StateRestartAdmitted: train.restart of the run from a checkpoint step
	// was allowed.
	StateRestartAdmitted AdmissionState = "restart_admitted"
	// StateCancelAdmitted: train.cancel of the run was allowed.
	StateCancelAdmitted AdmissionState = "cancel_admitted"
	// StateCleanupAdmitted: train.cleanup of the run was allowed; it never
	// releases the booking by itself.
	StateCleanupAdmitted AdmissionState = "cleanup_admitted"
	// StateReleaseAdmitted: booking.release of the booking was allowed.
	StateReleaseAdmitted AdmissionState = "release_admitted"
	// StateDenied: nothing was written; the confirmation stays usable.
	StateDenied AdmissionState = "denied"
)

// Stored reports whether s is a state an allowed admission is stored
// with: one action's State (never StateDenied).
func (s AdmissionState) Stored() bool {
	for _, a := range actions {
		if a.State == s {
			return true
		}
	}
	return false
}

// ActionSpec is what one action carries and acts on. Every consumer (the
// admission's request checks, the ledger's commit, the webhook, the CLI)
// reads it here.
type ActionSpec struct {
	Action Action
	// Effect is what the ledger does on allow.
	Effect Effect
	// State is the admission state an allow reports and stores.
	State AdmissionState
	// Manifest: the request carries the manifest bytes and their signature
	// (the run's own manifest again for a stage advance).
	Manifest bool
	// Stage, CheckpointStep, EvalReports and ReleasesBooking: the request
	// may carry that field (stage and checkpoint_step are then required).
	Stage, CheckpointStep, EvalReports, ReleasesBooking bool
	// RunState is the state an allowed admission leaves the run it acts
	// on in (booking.release: each live run of the booking).
	RunState RunState
	// Summary says what the action does, for help texts and docs.
	Summary string
}

// actions is the one list of actions, in the order of a run's life.
var actions = []ActionSpec{
	{Action: TrainCreate, Effect: EffectCreateRun, State: StateAdmitted, Manifest: true, EvalReports: true, RunState: RunLive,
		Summary: "admit a new run on the booking (manifest; ladder decisions for custom data)"},
	{Action: TrainStageAdvance, Effect: EffectStepRun, State: StateStageAdvanced, Manifest: true,
		Stage: true, EvalReports: true, RunState: RunLive,
		Summary: "move a live run to its next stage (its manifest again, the eval report of the stage it leaves)"},
	{Action: TrainRestart, Effect: EffectStepRun, State: StateRestartAdmitted, CheckpointStep: true, RunState: RunLive,
		Summary: "restart a live run from a checkpoint step"},
	{Action: TrainCancel, Effect: EffectEndRun, State: StateCancelAdmitted, RunState: RunCancelled,
		Summary: "end a run early"},
	{Action: TrainCleanup, Effect: EffectEndRun, State: StateCleanupAdmitted, ReleasesBooking: true, RunState: RunCleanedUp,
		Summary: "end a finished run and free its resources"},
	{Action: BookingRelease, Effect: EffectReleaseBooking, State: StateReleaseAdmitted, RunState: RunReleased,
		Summary: "release the booking, ending its live runs"},
}

// Actions returns every action's spec, in the order of a run's life.
func Actions() []ActionSpec { return append([]ActionSpec(nil), actions...) }

// Spec returns the action's spec; ok is false for an unknown action.
func (a Action) Spec() (spec ActionSpec, ok bool) {
	for _, s := range actions {
		if s.Action == a {
			return s, true
		}
	}
	return ActionSpec{}, false
}

// Valid reports whether a is a known action.
func (a Action) Valid() bool {
	_, ok := a.Spec()
	return ok
}

// Effect is the action's effect on the ledger; zero for an unknown action.
func (a Action) Effect() Effect {
	s, _ := a.Spec()
	return s.Effect
}

// ActsOnRun reports whether the action names an admitted run (run_id,
// bound by its confirmation too): every action that steps or ends a run.
func (a Action) ActsOnRun() bool {
	e := a.Effect()
	return e == EffectStepRun || e == EffectEndRun
}

// CarriesManifest reports whether the request sends manifest bytes.
func (a Action) CarriesManifest() bool {
	s, _ := a.Spec()
	return s.Manifest
}

// Teardown reports whether the action stops a run or the booking. Teardown
// stays admissible when the booking or entitlement is revoked or the term
// has passed: stopping never needs the booking's consent.
func (a Action) Teardown() bool {
	e := a.Effect()
	return e == EffectEndRun || e == EffectReleaseBooking
}

// ActionNames lists the actions as "a, b, c or d", for messages.
func ActionNames() string {
	names := make([]string, len(actions))
	for i, s := range actions {
		names[i] = string(s.Action)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// ActionsWhere lists, as "a, b or c", the actions whose spec has the
// property, for messages ("stage is only for ...").
func ActionsWhere(has func(ActionSpec) bool) string {
	var names []string
	for _, s := range actions {
		if has(s) {
			names = append(names, string(s.Action))
		}
	}
	switch len(names) {
	case 0:
		return "no action"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
