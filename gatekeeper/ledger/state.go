package ledger

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// The run's state machine (docs/architecture.md §3, "A run's life"). A run
// is in one api.RunState at a time, read from its record by State:
//
//	live        train.create admitted it; train.stage.advance moves its
//	            stage, train.restart keeps it live
//	halted      a signed eval report failed its stage's gate (HaltRun), or
//	            its stage's report deadline passed without a passing report
//	            (Overdue: no event, time, like expired)
//	revoked     its booking, or the entitlement it was admitted under, was
//	            revoked while it was live (Revoke)
//	cancelled   ended by train.cancel
//	cleaned_up  ended by train.cleanup
//	released    ended by booking.release of its booking
//	expired     its declared end plus grace passed (no event: time)
//
// Every transition is an admission, a revocation or a halt, written in the
// same transaction as what caused it, with its decision id, actor and
// reason (RunEvent). May is the one predicate "may this run do that now?"
// that every enforcement point asks — the admission pipeline, both stores'
// commits, the Kubernetes webhook — and State is the fact the policy gets
// (input.ledger.run.state), so none of them can disagree.

// Errors of the run's state.
var (
	// ErrRunHalted: a train.stage.advance or train.restart (or a new
	// workload) of a run a failed eval gate halted (see RunHaltedError).
	// Nothing was written.
	ErrRunHalted = errors.New("run halted by a failed eval gate")
	// ErrReportOverdue: the run's stage had a report deadline
	// (RunRecord.ReportDue) that passed without a passing eval report: the
	// run counts as halted (see ReportOverdueError, which wraps both this
	// and ErrRunHalted). Nothing was written.
	ErrReportOverdue = errors.New("eval report overdue")
	// ErrBookingAccount: the booking is bound to another account (the
	// account of its first admission). Nothing was written.
	ErrBookingAccount = errors.New("booking bound to another account")
)

// RunHalt is the halt transition a failed eval gate recorded on a run.
type RunHalt struct {
	// At is the decision time of the denied stage advance that carried the
	// failing report; zero while the run was never halted.
	At time.Time
	// DecisionID is that advance's decision id.
	DecisionID string
	// Stage is the stage whose gate failed (the run's stage then).
	Stage string
	// ReportDigest is "sha256:<hex>" of the eval report token.
	ReportDigest string
	// FailedEvals are the metrics that failed or had no result, sorted.
	FailedEvals []string
	// By names the eval authority key that signed the report.
	By string
}

// RunReport is a passing eval report the eval authority posted for the
// run's current stage (RecordReport): it meets the stage's report deadline.
type RunReport struct {
	// At is the report's decision time; zero while none was recorded for
	// the stage.
	At time.Time
	// DecisionID is the post's decision id; Stage the stage the report
	// judged (the run's stage); ReportDigest "sha256:<hex>" of the report
	// token; By the eval authority key that signed it.
	DecisionID, Stage, ReportDigest, By string
}

// RunRevocation is the revocation transition a revoked booking or
// entitlement recorded on a run that was live.
type RunRevocation struct {
	// At is when the revocation was stored; zero while the run was never
	// revoked.
	At time.Time
	// Kind is RevokeBooking or RevokeEntitlement; Subject the booking id or
	// the entitlement's jti.
	Kind    RevocationKind
	Subject string
	// By is the revoker, Reason its reason, DecisionID the revocation's
	// decision id (its decision-log line).
	By, Reason, DecisionID string
}

// Revocation returns r as the revocation it records.
func (r RunRevocation) Revocation() Revocation {
	return Revocation{Kind: r.Kind, Subject: r.Subject, Reason: r.Reason, RevokedBy: r.By, RevokedAt: r.At,
		DecisionID: r.DecisionID}
}

// State is the run's state at now. Ends come first (an end at or before
// now, then the declared end passing), then a revocation, then a halt,
// then an overdue eval report (Overdue, halted too): a stored revocation
// or halt holds whatever the decision times, as a stored release does
// (CheckCapacity).
func (r RunRecord) State(now time.Time) api.RunState {
	switch {
	case !r.EndedAt.IsZero() && !now.Before(r.EndedAt):
		if spec, ok := r.EndedBy.Spec(); ok && spec.RunState.Ended() {
			return spec.RunState
		}
		return api.RunExpired // an end this binary does not know: ended all the same
	case !now.Before(r.LiveUntil):
		return api.RunExpired
	case !r.Revocation.At.IsZero():
		return api.RunRevoked
	case !r.Halt.At.IsZero(), r.Overdue(now):
		return api.RunHalted
	}
	return api.RunLive
}

// Overdue reports whether the eval report of the run's current stage is
// overdue at now: the stage has a deadline (ReportDue), now is at or past
// it, and no passing report was recorded for the stage before it
// (Report). It is computed from the record alone, with the caller's
// clock, so every enforcement point asking State or MayWork agrees
// without a sweeper; no event marks it, as none marks an expiry.
func (r RunRecord) Overdue(now time.Time) bool {
	return !r.ReportDue.IsZero() && !now.Before(r.ReportDue) &&
		(r.Report.At.IsZero() || r.Report.Stage != r.Stage || !r.Report.At.Before(r.ReportDue))
}

// May is the one answer to "may this run do a now?":
//
//   - a teardown of the run (train.cancel, train.cleanup) is always
//     admissible: stopping never needs the run's consent, and an ended
//     run stays as it ended;
//   - an action that steps the run (train.stage.advance, train.restart)
//     needs MayWork.
//
// Any other action does not act on an existing run: ErrInvalid.
func (r RunRecord) May(a api.Action, now time.Time) error {
	switch a.Effect() {
	case api.EffectEndRun:
		return nil
	case api.EffectStepRun:
		return r.MayWork(now)
	}
	return fmt.Errorf("ledger: %q does not act on an admitted run: %w", a, ErrInvalid)
}

// MayWork reports whether the run may take new work at now — a stage
// advance, a restart, a new workload (the Kubernetes webhook): only a live
// run may. Otherwise the error says why: a *RevocationError (ErrRevoked)
// for a revoked run, a *RunHaltedError (ErrRunHalted) for a halted one, a
// *ReportOverdueError (ErrReportOverdue and ErrRunHalted) for one whose
// stage's eval report is overdue, a *RunEndedError (ErrRunEnded) for one
// that ended.
func (r RunRecord) MayWork(now time.Time) error {
	switch s := r.State(now); s {
	case api.RunLive:
		return nil
	case api.RunRevoked:
		return &RevocationError{Revocation: r.Revocation.Revocation()}
	case api.RunHalted:
		if r.Halt.At.IsZero() {
			return &ReportOverdueError{Stage: r.Stage, Due: r.ReportDue}
		}
		return &RunHaltedError{Halt: r.Halt}
	default:
		return &RunEndedError{State: s}
	}
}

// RunHaltedError is returned for a halted run. It wraps ErrRunHalted.
type RunHaltedError struct{ Halt RunHalt }

func (e *RunHaltedError) Error() string {
	return fmt.Sprintf("ledger: the run was halted in stage %s by failed evals %s: %v",
		e.Halt.Stage, strings.Join(e.Halt.FailedEvals, ", "), ErrRunHalted)
}

func (e *RunHaltedError) Unwrap() error { return ErrRunHalted }

// ReportOverdueError is returned for a run whose stage's eval report is
// overdue (RunRecord.Overdue). It wraps ErrReportOverdue and ErrRunHalted:
// the run counts as halted.
type ReportOverdueError struct {
	Stage string
	Due   time.Time
}

func (e *ReportOverdueError) Error() string {
	return fmt.Sprintf("ledger: the eval report of stage %s was due at %s and none passing was recorded: %v",
		e.Stage, e.Due.UTC().Format(time.RFC3339), ErrReportOverdue)
}

func (e *ReportOverdueError) Unwrap() []error { return []error{ErrReportOverdue, ErrRunHalted} }

// RunEndedError is returned for a run that ended. It wraps ErrRunEnded.
type RunEndedError struct{ State api.RunState }

func (e *RunEndedError) Error() string {
	return fmt.Sprintf("ledger: the run is %s: %v", e.State, ErrRunEnded)
}

func (e *RunEndedError) Unwrap() error { return ErrRunEnded }

// Equal reports whether r and o are the same record, times by instant.
func (r RunRecord) Equal(o RunRecord) bool {
	if !r.AdmittedAt.Equal(o.AdmittedAt) || !r.LiveUntil.Equal(o.LiveUntil) || !r.EndedAt.Equal(o.EndedAt) ||
		!r.Halt.At.Equal(o.Halt.At) || !r.Revocation.At.Equal(o.Revocation.At) ||
		!r.ReportDue.Equal(o.ReportDue) || !r.Report.At.Equal(o.Report.At) ||
		!slices.Equal(r.Halt.FailedEvals, o.Halt.FailedEvals) {
		return false
	}
	r.AdmittedAt, r.LiveUntil, r.EndedAt, r.Halt.At, r.Revocation.At = o.AdmittedAt, o.LiveUntil, o.EndedAt, o.Halt.At, o.Revocation.At
	r.ReportDue, r.Report.At = o.ReportDue, o.Report.At
	r.Halt.FailedEvals = o.Halt.FailedEvals
	return r.comparable() == o.comparable()
}

// comparable is r without its slice, for ==.
func (r RunRecord) comparable() runKey {
	return runKey{r.RunID, r.Account, r.BookingID, r.ManifestDigest, r.EntitlementJTI, r.GPUs, r.BookedGPUs,
		r.AdmittedAt, r.LiveUntil, r.EndedAt, r.EndedBy, r.Stage, r.Restarts, r.LastCheckpointStep, r.Plan,
		r.Halt.At, r.Halt.DecisionID, r.Halt.Stage, r.Halt.ReportDigest, r.Halt.By, r.Revocation, r.ReportDue, r.Report}
}

type runKey struct {
	runID, account, bookingID, manifestDigest, entitlementJTI string
	gpus, bookedGPUs                                          int
	admittedAt, liveUntil, endedAt                            time.Time
	endedBy                                                   api.Action
	stage                                                     string
	restarts                                                  int
	lastStep                                                  int64
	plan                                                      RunPlan
	haltAt                                                    time.Time
	haltDecision, haltStage, haltDigest, haltBy               string
	revocation                                                RunRevocation
	reportDue                                                 time.Time
	report                                                    RunReport
}

// Held is r as a booking's usage lists it: the facts of the GPUs and the
// checkpoint storage it holds (run, account, booking, manifest, GPUs,
// checkpoint GiB, times, how it ended, stage).
// ledger.Usage lists runs this way on every store, so a usage never
// disagrees with another store's; ask RunRecord for the run's state.
func (r RunRecord) Held() RunRecord {
	return RunRecord{RunID: r.RunID, Account: r.Account, BookingID: r.BookingID, ManifestDigest: r.ManifestDigest,
		GPUs: r.GPUs, BookedGPUs: r.BookedGPUs, AdmittedAt: r.AdmittedAt, LiveUntil: r.LiveUntil,
		EndedAt: r.EndedAt, EndedBy: r.EndedBy, Stage: r.Stage, Plan: RunPlan{CheckpointGiB: r.Plan.CheckpointGiB}}
}

// RunEvent is one transition of a run, as the store wrote it in the same
// transaction as its cause: an admission on the run (train.create, a stage
// advance, a restart, a cancel, a cleanup, or a booking.release that ended
// it), a revocation that revoked it, a halt, or a passing eval report
// recorded for its stage (To live, no Action: ReportEvent), which keeps it
// live past its stage's report deadline.
type RunEvent struct {
	RunID string
	// At is the cause's time: the admission's decision time, the
	// revocation's, the halt's.
	At time.Time
	// To is the state the event moved the run to; "" when an admission
	// changed nothing (a cancel of a run that had already ended).
	To api.RunState
	// Action is the admission's action; "" for a revocation or a halt.
	Action api.Action
	// DecisionID is the admission's, the revocation's or the halting
	// advance's decision id.
	DecisionID string
	// By is who caused it: the admitting account, the revoker, the eval
	// authority key that signed a failing report.
	By string
	// Reason says why, for a revocation and a halt.
	Reason string
	// Stage is the stage a train.create starts the run in or a stage
	// advance moves it to; CheckpointStep is a restart's step.
	Stage          string
	CheckpointStep int64
	// ReportDue is, for a train.create or a stage advance, when the eval
	// report of the stage it enters is due (zero: no deadline).
	ReportDue time.Time
	// GPUs is what the run holds from this event on when the event set it:
	// a train.create's world size, or the world size of the larger stage a
	// stage advance grew the run to (GPUEvent); 0 for every other event.
	GPUs int
}

// MaxRunEvents bounds the events RunEvents returns (the oldest are kept):
// every event but a revocation and a halt needs a confirmation of its own.
const MaxRunEvents = 1024

// AdmissionEvent is the event the admission a writes on the run it acts
// on; changed says whether it moved the run (a teardown of an ended run
// does not).
func AdmissionEvent(a Admission, runID string, changed bool) RunEvent {
	spec, _ := a.Action.Spec()
	e := RunEvent{RunID: runID, At: a.CreatedAt, Action: a.Action, DecisionID: a.DecisionID, By: a.Account,
		Stage: a.Stage, CheckpointStep: a.CheckpointStep, ReportDue: a.ReportDue}
	if changed {
		e.To = spec.RunState
	}
	if spec.Effect == api.EffectCreateRun {
		e.GPUs = a.GPUs
	}
	return e
}

// StepEvent is the event the step a (a stage advance or restart) writes on
// its run r as r was before it: AdmissionEvent, with the GPUs the run
// grew to when a grew it (Grows).
func StepEvent(a Admission, r RunRecord) RunEvent {
	e := AdmissionEvent(a, r.RunID, true)
	if Grows(r, a) {
		e.GPUs = a.StageGPUs
	}
	return e
}

// RevocationEvent is the event the revocation r writes on a run it revoked.
func RevocationEvent(runID string, r Revocation) RunEvent {
	return RunEvent{RunID: runID, At: r.RevokedAt, To: api.RunRevoked, DecisionID: r.DecisionID, By: r.RevokedBy,
		Reason: revocationReason(r)}
}

func revocationReason(r Revocation) string {
	s := fmt.Sprintf("%s %s revoked", r.Kind, r.Subject)
	if r.Reason != "" {
		s += ": " + r.Reason
	}
	return s
}

// HaltEvent is the event h writes on its run.
func HaltEvent(h Halt) RunEvent {
	return RunEvent{RunID: h.RunID, At: h.At, To: api.RunHalted, DecisionID: h.DecisionID, By: h.By,
		Stage: h.Stage, Reason: haltReason(h.RunHalt)}
}

func haltReason(h RunHalt) string {
	return fmt.Sprintf("stage %s: failed %s (report %s)", h.Stage, strings.Join(h.FailedEvals, ", "), h.ReportDigest)
}

// Halt asks HaltRun to halt the run RunID of Account on BookingID.
type Halt struct {
	RunID, Account, BookingID string
	RunHalt
}

// maxFailedEvals bounds Halt.FailedEvals.
const maxFailedEvals = 64

// Validate reports whether h may be stored. The error wraps ErrInvalid.
func (h Halt) Validate() error {
	bad := func(field, problem string) error {
		return fmt.Errorf("ledger: halt %s %s: %w", field, problem, ErrInvalid)
	}
	if !IsRunID(h.RunID) {
		return bad("RunID", "is not a run id from NewRunID")
	}
	for _, f := range []struct{ name, v string }{{"Account", h.Account}, {"BookingID", h.BookingID},
		{"DecisionID", h.DecisionID}, {"Stage", h.Stage}, {"By", h.By}} {
		if p := idProblem(f.v); p != "" {
			return bad(f.name, p)
		}
	}
	if !IsSHA256Digest(h.ReportDigest) {
		return bad("ReportDigest", "is not sha256: followed by 64 lowercase hex digits")
	}
	if len(h.FailedEvals) == 0 || len(h.FailedEvals) > maxFailedEvals {
		return bad("FailedEvals", fmt.Sprintf("must name 1 to %d evals", maxFailedEvals))
	}
	for _, e := range h.FailedEvals {
		if p := idProblem(e); p != "" || strings.Contains(e, ",") {
			return bad("FailedEvals", "holds an eval name that is empty, too long, or has a comma or control character")
		}
	}
	if !slices.IsSorted(h.FailedEvals) || len(slices.Compact(slices.Clone(h.FailedEvals))) != len(h.FailedEvals) {
		return bad("FailedEvals", "is not sorted without repeats")
	}
	if h.At.IsZero() {
		return bad("At", "is zero")
	}
	return nil
}

// CheckHalt is the rule every store applies inside HaltRun's transaction to
// the run r it halts: the run is h's account's, on its booking (else
// ErrConfirmationMismatch), may take work at h.At (else MayWork's error: a
// revoked or ended run is not halted) and is still in the stage whose gate
// failed (else ErrStageConflict: another advance moved it on). A run
// already halted is not halted again, whatever happened since (halted
// false, no error).
func CheckHalt(r RunRecord, h Halt) (halt bool, err error) {
	if r.Account != h.Account || r.BookingID != h.BookingID {
		return false, fmt.Errorf("ledger: halt: run of another booking or account: %w", ErrConfirmationMismatch)
	}
	if !r.Halt.At.IsZero() {
		return false, nil
	}
	if err := r.MayWork(h.At); err != nil {
		return false, err
	}
	if r.Stage != h.Stage {
		return false, fmt.Errorf("ledger: halt: the run left stage %s: %w", h.Stage, ErrStageConflict)
	}
	return true, nil
}

// Report asks RecordReport to record that a passing eval report for
// Stage reached the run RunID of Account on BookingID.
type Report struct {
	RunID, Account, BookingID string
	RunReport
}

// Validate reports whether p may be stored. The error wraps ErrInvalid.
func (p Report) Validate() error {
	bad := func(field, problem string) error {
		return fmt.Errorf("ledger: report %s %s: %w", field, problem, ErrInvalid)
	}
	if !IsRunID(p.RunID) {
		return bad("RunID", "is not a run id from NewRunID")
	}
	for _, f := range []struct{ name, v string }{{"Account", p.Account}, {"BookingID", p.BookingID},
		{"DecisionID", p.DecisionID}, {"Stage", p.Stage}, {"By", p.By}} {
		if pr := idProblem(f.v); pr != "" {
			return bad(f.name, pr)
		}
	}
	if !IsSHA256Digest(p.ReportDigest) {
		return bad("ReportDigest", "is not sha256: followed by 64 lowercase hex digits")
	}
	if p.At.IsZero() {
		return bad("At", "is zero")
	}
	return nil
}

// CheckRecordReport is the rule every store applies inside RecordReport's
// transaction to the run r: the run is p's account's, on its booking
// (else ErrConfirmationMismatch), may take work at p.At (else MayWork's
// error: a halted, overdue, revoked or ended run records no report) and
// is still in the stage the report judged (else ErrStageConflict). A run
// with a report already recorded for the stage keeps it (record false, no
// error).
func CheckRecordReport(r RunRecord, p Report) (record bool, err error) {
	if r.Account != p.Account || r.BookingID != p.BookingID {
		return false, fmt.Errorf("ledger: report: run of another booking or account: %w", ErrConfirmationMismatch)
	}
	if !r.Report.At.IsZero() && r.Report.Stage == p.Stage && r.Stage == p.Stage {
		return false, nil
	}
	if err := r.MayWork(p.At); err != nil {
		return false, err
	}
	if r.Stage != p.Stage {
		return false, fmt.Errorf("ledger: report: the run left stage %s: %w", p.Stage, ErrStageConflict)
	}
	return true, nil
}

// ReportEvent is the event p writes on its run: To live, no action.
func ReportEvent(p Report) RunEvent {
	return RunEvent{RunID: p.RunID, At: p.At, To: api.RunLive, DecisionID: p.DecisionID, By: p.By, Stage: p.Stage,
		Reason: fmt.Sprintf("stage %s: eval report passed (report %s)", p.Stage, p.ReportDigest)}
}

// CheckEvents is the checkers' (fsck) state-machine invariant over one
// run's record and its events in the order they were written: the first
// is the train.create that admitted it; each stage advance or restart was
// admissible (RunRecord.May) on the run as the events before it left it;
// a halt or revocation is recorded on the run exactly when an event says
// so; the record's stage and restarts are the events', and so are its
// current stage's report deadline and passing report; its GPUs are what
// its train.create event admitted, grown only by stage advances, each to
// more than before (GPUEvent). It returns one line per violation.
func CheckEvents(r RunRecord, events []RunEvent) []string {
	var out []string
	bad := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("run %s: ", r.RunID)+fmt.Sprintf(format, args...))
	}
	if len(events) == 0 || events[0].Action.Effect() != api.EffectCreateRun || events[0].To != api.RunLive {
		bad("its first event is not the train.create that admitted it")
		return out
	}
	if events[0].GPUs <= 0 || events[0].GPUs > r.GPUs {
		bad("its train.create event admitted %d GPUs, the record holds %d", events[0].GPUs, r.GPUs)
	}
	// Replay: the record as each event found it. Ends keep the record's
	// own end (ends commit out of decision order: FirstEndStays).
	sim := RunRecord{RunID: r.RunID, Account: r.Account, BookingID: r.BookingID, LiveUntil: r.LiveUntil,
		Stage: events[0].Stage, ReportDue: events[0].ReportDue, GPUs: events[0].GPUs}
	halts, revocations, ends := 0, 0, 0
	for i, e := range events[1:] {
		switch {
		case e.To == api.RunHalted:
			halts++
			sim.Halt.At = e.At
		case e.To == api.RunRevoked:
			revocations++
			sim.Revocation.At = e.At
		case e.To == api.RunLive && e.Action == "":
			// a passing report: recorded only for the stage the run was
			// in, while it could take work
			if e.Stage != sim.Stage || sim.MayWork(e.At) != nil {
				bad("event %d (report, decision %s) was recorded for stage %s of a run in stage %s, state %s",
					i+1, e.DecisionID, e.Stage, sim.Stage, sim.State(e.At))
			}
			sim.Report = RunReport{At: e.At, Stage: e.Stage}
		case e.Action.Effect() == api.EffectStepRun:
			if err := sim.May(e.Action, e.At); err != nil {
				bad("event %d (%s, decision %s) was not admissible: %v", i+1, e.Action, e.DecisionID, err)
			}
			if spec, _ := e.Action.Spec(); spec.Stage {
				sim.Stage, sim.ReportDue, sim.Report = e.Stage, e.ReportDue, RunReport{}
			}
			if GPUEvent(e) {
				if !movesStage(e.Action) || e.GPUs <= sim.GPUs {
					bad("event %d (%s, decision %s) set %d GPUs on a run holding %d: only a stage advance grows a run",
						i+1, e.Action, e.DecisionID, e.GPUs, sim.GPUs)
				}
				sim.GPUs = max(sim.GPUs, e.GPUs)
			}
			if spec, _ := e.Action.Spec(); spec.CheckpointStep {
				if r.Plan.Known() && !r.Plan.Writes(e.CheckpointStep) {
					bad("event %d restarted from step %d, which its plan (every %d of %d steps) never writes",
						i+1, e.CheckpointStep, r.Plan.IntervalSteps, r.Plan.Steps)
				}
				sim.Restarts++
				sim.LastCheckpointStep = e.CheckpointStep
			}
		case e.Action.Effect() == api.EffectEndRun || e.Action.Effect() == api.EffectReleaseBooking:
			if e.To == "" {
				continue // a teardown of a run that had ended: no transition
			}
			ends++
			if ends == 1 && (!e.At.Equal(r.EndedAt) || e.Action != r.EndedBy) {
				bad("event %d ended it at %s by %s, the record at %s by %s", i+1, e.At, e.Action, r.EndedAt, r.EndedBy)
			}
			if ends == 1 {
				sim.EndedAt, sim.EndedBy = e.At, e.Action
			}
		default:
			bad("event %d (%q to %q) is no transition", i+1, e.Action, e.To)
		}
	}
	for i, e := range events[1:] {
		if GPUEvent(e) && e.Action.Effect() != api.EffectStepRun {
			bad("event %d (%q, decision %s) set %d GPUs: only a train.create or a stage advance does", i+1, e.Action,
				e.DecisionID, e.GPUs)
		}
	}
	if events[0].GPUs > 0 && sim.GPUs != r.GPUs {
		bad("%d GPUs on the record; the events say %d", r.GPUs, sim.GPUs)
	}
	if halts > 1 || revocations > 1 || ends > 1 {
		bad("%d halts, %d revocations and %d ends recorded, at most one each", halts, revocations, ends)
	}
	if (ends == 1) != !r.EndedAt.IsZero() {
		bad("ended %v on the record, %d end events", !r.EndedAt.IsZero(), ends)
	}
	if (halts == 1) != !r.Halt.At.IsZero() || (revocations == 1) != !r.Revocation.At.IsZero() {
		bad("halted %v and revoked %v on the record, %d halt and %d revocation events", !r.Halt.At.IsZero(),
			!r.Revocation.At.IsZero(), halts, revocations)
	}
	if sim.Stage != r.Stage || sim.Restarts != r.Restarts || sim.LastCheckpointStep != r.LastCheckpointStep {
		bad("stage %q, %d restarts (last step %d) on the record; the events say %q, %d (%d)", r.Stage, r.Restarts,
			r.LastCheckpointStep, sim.Stage, sim.Restarts, sim.LastCheckpointStep)
	}
	if !sim.ReportDue.Equal(r.ReportDue) || !sim.Report.At.Equal(r.Report.At) ||
		(!r.Report.At.IsZero() && r.Report.Stage != sim.Report.Stage) {
		bad("report due %s, passing report at %s on the record; the events say %s, %s", r.ReportDue, r.Report.At,
			sim.ReportDue, sim.Report.At)
	}
	return out
}

// MaxRunPage bounds RunQuery.Limit.
const MaxRunPage = 200

// RunQuery selects an account's runs for Store.Runs.
type RunQuery struct {
	// Account is required; BookingID narrows to one booking when set.
	Account, BookingID string
	// After is the run id the page starts after ("" for the first page).
	After string
	// Limit is 1 to MaxRunPage.
	Limit int
}

// Validate reports whether q may be asked. The error wraps ErrInvalid.
func (q RunQuery) Validate() error {
	if p := idProblem(q.Account); p != "" {
		return fmt.Errorf("ledger: run query Account %s: %w", p, ErrInvalid)
	}
	for _, f := range []struct{ name, v string }{{"BookingID", q.BookingID}, {"After", q.After}} {
		if len(f.v) > MaxIDLen {
			return fmt.Errorf("ledger: run query %s is longer than %d bytes: %w", f.name, MaxIDLen, ErrInvalid)
		}
		if p := textProblem(f.v); p != "" {
			return fmt.Errorf("ledger: run query %s %s: %w", f.name, p, ErrInvalid)
		}
	}
	if q.Limit < 1 || q.Limit > MaxRunPage {
		return fmt.Errorf("ledger: run query Limit %d is not 1 to %d: %w", q.Limit, MaxRunPage, ErrInvalid)
	}
	return nil
}
