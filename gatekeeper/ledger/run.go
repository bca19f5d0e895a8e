package ledger

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// A run's life in the ledger. A train.create admission creates a RunRecord;
// the run holds GPUs of its booking from then until it ends:
//
//   - a train.cancel or train.cleanup admission of the run ends it (EndedBy
//     names the action, EndedAt its decision time);
//   - a booking.release admission of its booking ends every run on it;
//   - or its declared wall-clock end plus a grace (LiveUntil) passes.
//
// Live is the one notion of "does this run hold its GPUs": the capacity
// check at commit and the booking's usage. A halted or revoked run still
// holds them until one of the above ends it (its workloads run until they
// are torn down). Whether a run may do something — step, get a workload —
// is May, over its State (state.go).

// RunRecord is a run admitted by train.create, as the ledger keeps it.
type RunRecord struct {
	// RunID is "run_" + 26 characters (NewRunID).
	RunID string
	// Account and BookingID are the admitting caller's account and the
	// booking the run draws its GPUs from.
	Account   string
	BookingID string
	// ManifestDigest is "sha256:<hex>" of the admitted manifest bytes.
	ManifestDigest string
	// GPUs is what the run holds of its booking from admission until it
	// ends: its world size (hardware.nodes × hardware.gpus_per_node) at
	// train.create, grown to the world size of a larger stage by the
	// train.stage.advance that entered it (Stepped; never shrunk). The
	// events that set it (RunEvent.GPUs) say when it held how many.
	GPUs int
	// BookedGPUs is the booking's GPUs (entitlement gpu.nodes ×
	// gpu.gpus_per_node) when the run was admitted.
	BookedGPUs int
	// AdmittedAt is the train.create decision time.
	AdmittedAt time.Time
	// LiveUntil is AdmittedAt + budget.max_wall_clock_hours + the bundle's
	// run grace: after it the run holds nothing, whether or not it was
	// cancelled.
	LiveUntil time.Time
	// EndedAt and EndedBy are set by the admission that ended the run
	// (train.cancel, train.cleanup or booking.release); zero and "" while it
	// was not ended that way.
	EndedAt time.Time
	EndedBy api.Action
	// Stage is the curriculum stage the run is in: its manifest's
	// objective.stage at train.create, moved one step by each
	// train.stage.advance ("" when the manifest named none).
	Stage string
	// EntitlementJTI is the jti of the entitlement train.create admitted
	// the run under: revoking that entitlement revokes the run.
	EntitlementJTI string
	// Restarts counts the run's train.restart admissions; LastCheckpointStep
	// is the step the latest restarted from (each step is in RunEvents).
	Restarts           int
	LastCheckpointStep int64
	// Plan is the run's checkpoint plan, recorded by its train.create
	// (zero for a run admitted before plans were recorded).
	Plan RunPlan
	// Halt is the halt a failed eval gate recorded (zero At: never halted).
	Halt RunHalt
	// ReportDue is when the eval report of the run's current stage is
	// due: its train.create or the stage advance that entered the stage
	// recorded it (the decision time + the stage's report deadline from
	// bundle data). From then on, without a passing report recorded for
	// the stage before it (Report), the run counts as halted
	// (RunRecord.Overdue). Zero: the stage has no deadline.
	ReportDue time.Time
	// Report is the passing eval report the eval authority posted for the
	// run's current stage (RecordReport); zero At: none since the stage
	// was entered (a stage advance clears it).
	Report RunReport
	// Revocation is the revocation that revoked the run while it was live
	// (zero At: never revoked).
	Revocation RunRevocation
}

// Live reports whether the run holds its GPUs at now: not ended by an
// admission at or before now, and now before LiveUntil. A stored run holds
// from the moment it was committed: Live does not compare now with
// AdmittedAt, so a decision whose time is a little behind the admitting
// replica's clock (or an admission committed after a racing one that
// decided later) still counts it.
func (r RunRecord) Live(now time.Time) bool {
	if !now.Before(r.LiveUntil) {
		return false
	}
	return r.EndedAt.IsZero() || now.Before(r.EndedAt)
}

// BookingUsage is what a booking has given out at one instant.
type BookingUsage struct {
	BookingID string
	// Account is the account the booking is bound to (its first
	// admission's); "" while nothing was admitted on it.
	Account string
	// HeldGPUs is the sum of GPUs over Runs.
	HeldGPUs int
	// HeldCheckpointGiB is the sum of the checkpoint storage over Runs
	// (RunPlan.CheckpointGiB).
	HeldCheckpointGiB int64
	// Runs are the booking's live runs, oldest first.
	Runs []RunRecord
	// Released is when a booking.release admission released the booking
	// (zero if it was not).
	Released time.Time
}

// Usage returns the booking's usage at now from its runs (any order, any
// liveness), each as RunRecord.Held lists it; the caller sets Account.
func Usage(bookingID string, runs []RunRecord, released time.Time, now time.Time) BookingUsage {
	u := BookingUsage{BookingID: bookingID, Released: released, Runs: make([]RunRecord, 0, len(runs))}
	for _, r := range runs {
		if r.BookingID == bookingID && r.Live(now) {
			u.Runs = append(u.Runs, r.Held())
			u.HeldGPUs += r.GPUs
			u.HeldCheckpointGiB += r.Plan.CheckpointGiB
		}
	}
	slices.SortFunc(u.Runs, func(a, b RunRecord) int {
		if c := a.AdmittedAt.Compare(b.AdmittedAt); c != 0 {
			return c
		}
		return strings.Compare(a.RunID, b.RunID)
	})
	if len(u.Runs) == 0 {
		u.Runs = nil // as before: no live runs is a nil slice
	}
	return u
}

// CapacityError is returned by Commit when a train.create, or a
// train.stage.advance growing its run (CheckGrow), would hold more GPUs
// than its booking has. It wraps ErrCapacityExceeded.
type CapacityError struct {
	BookingID  string
	BookedGPUs int
	HeldGPUs   int // by the live runs below, before this admission
	// WantGPUs is what the admission adds: a create's world size, a grow's
	// difference (StageGPUs − RunGPUs).
	WantGPUs int
	// RunID and RunGPUs are, for a grow, the growing run and the GPUs it
	// holds (counted in HeldGPUs), StageGPUs the stage's world size; ""
	// and 0 for a create.
	RunID              string
	RunGPUs, StageGPUs int
	// Runs are the booking's live runs of the admitting account (run id,
	// GPUs, live until): what the caller can cancel to make room. Runs of
	// other accounts are counted in HeldGPUs but never named.
	Runs []RunRecord
}

func (e *CapacityError) Error() string {
	if e.RunID != "" {
		return fmt.Sprintf("ledger: booking capacity: run %s grows from %d to %d GPUs: %d GPUs held + %d more > %d booked",
			e.RunID, e.RunGPUs, e.StageGPUs, e.HeldGPUs, e.WantGPUs, e.BookedGPUs)
	}
	named, more := NamedRuns(e.Runs)
	ids := make([]string, 0, len(named))
	for _, r := range named {
		ids = append(ids, fmt.Sprintf("%s (%d GPUs)", r.RunID, r.GPUs))
	}
	tail := ""
	if more > 0 {
		tail = fmt.Sprintf(" and %d more", more)
	}
	return fmt.Sprintf("ledger: booking capacity: %d GPUs held + %d wanted > %d booked; live runs: %s%s",
		e.HeldGPUs, e.WantGPUs, e.BookedGPUs, strings.Join(ids, ", "), tail)
}

// MaxNamedRuns bounds how many of an account's live runs the policy input
// (input.ledger.booking.live_runs) and a capacity refusal's message name;
// the rest are only counted, so neither grows with the booking.
const MaxNamedRuns = 16

// NamedRuns returns the runs worth naming to free GPUs — at most
// MaxNamedRuns of runs, the largest first, then the earliest LiveUntil,
// then the lowest RunID — in runs' own order, and how many are left out.
// runs with at most MaxNamedRuns elements are returned as they are.
func NamedRuns(runs []RunRecord) (named []RunRecord, more int) {
	if len(runs) <= MaxNamedRuns {
		return runs, 0
	}
	idx := make([]int, len(runs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int {
		a, b := runs[i], runs[j]
		if a.GPUs != b.GPUs {
			return b.GPUs - a.GPUs
		}
		if c := a.LiveUntil.Compare(b.LiveUntil); c != 0 {
			return c
		}
		if c := strings.Compare(a.RunID, b.RunID); c != 0 {
			return c
		}
		return i - j
	})
	idx = idx[:MaxNamedRuns]
	slices.Sort(idx)
	named = make([]RunRecord, len(idx))
	for k, i := range idx {
		named[k] = runs[i]
	}
	return named, len(runs) - MaxNamedRuns
}

func (e *CapacityError) Unwrap() error { return ErrCapacityExceeded }

// CheckCapacity is the capacity rule every store applies inside Commit's
// transaction, for a train.create admission a: the booking's runs live at
// a.CreatedAt plus a.GPUs must not exceed a.BookedGPUs, and the booking must
// not be released. runs are the booking's runs (any liveness).
func CheckCapacity(runs []RunRecord, released time.Time, a Admission) error {
	if a.Action.Effect() != api.EffectCreateRun {
		return nil
	}
	// A release stored before this commit wins whatever the decision
	// times (the same rule as Live).
	if !released.IsZero() {
		return fmt.Errorf("ledger: commit: booking released at %s: %w", released.UTC().Format(time.RFC3339), ErrBookingReleased)
	}
	u := Usage(a.BookingID, runs, released, a.CreatedAt)
	if u.HeldGPUs+a.GPUs <= a.BookedGPUs {
		return checkStorage(u, a)
	}
	e := &CapacityError{BookingID: a.BookingID, BookedGPUs: a.BookedGPUs, HeldGPUs: u.HeldGPUs, WantGPUs: a.GPUs}
	for _, r := range u.Runs {
		if r.Account == a.Account {
			e.Runs = append(e.Runs, r)
		}
	}
	return e
}

// checkStorage is the checkpoint half of the capacity rule: with a quota
// known, the booking's live runs and the new one keep at most the quota in
// the booking's checkpoint store.
func checkStorage(u BookingUsage, a Admission) error {
	if a.Plan.StorageQuotaGiB <= 0 || u.HeldCheckpointGiB+a.Plan.CheckpointGiB <= a.Plan.StorageQuotaGiB {
		return nil
	}
	return &StorageQuotaError{BookingID: a.BookingID, QuotaGiB: a.Plan.StorageQuotaGiB,
		HeldGiB: u.HeldCheckpointGiB, WantGiB: a.Plan.CheckpointGiB}
}

// StorageQuotaError is returned by Commit when a train.create's checkpoints
// and those of its booking's live runs would exceed the booking's
// checkpoint storage quota. It wraps ErrStorageQuotaExceeded.
type StorageQuotaError struct {
	BookingID                  string
	QuotaGiB, HeldGiB, WantGiB int64
}

func (e *StorageQuotaError) Error() string {
	return fmt.Sprintf("ledger: booking checkpoint storage: %d GiB kept by live runs + %d wanted > %d GiB quota",
		e.HeldGiB, e.WantGiB, e.QuotaGiB)
}

func (e *StorageQuotaError) Unwrap() error { return ErrStorageQuotaExceeded }

// Grows reports whether the admission a grows its run r: a stage advance
// into a stage (a.StageGPUs) larger than what r holds.
func Grows(r RunRecord, a Admission) bool {
	return movesStage(a.Action) && a.StageGPUs > r.GPUs
}

// CheckGrow is the capacity rule every store applies inside Commit's
// transaction to a stage advance a that grows its run r (Grows), after
// CheckRunStep, serialized with the creates on the booking: the GPUs of
// the booking's runs live at a.CreatedAt (runs: any liveness; r among
// them, at what it holds now) plus the difference a.StageGPUs − r.GPUs
// must not exceed r.BookedGPUs, the booking's GPUs as the run was
// admitted against them, else a *CapacityError naming the figures and
// a.Account's live runs. An advance that does not grow its run passes.
func CheckGrow(runs []RunRecord, r RunRecord, a Admission) error {
	if !Grows(r, a) {
		return nil
	}
	u := Usage(r.BookingID, runs, time.Time{}, a.CreatedAt)
	// The other runs' GPUs and what r holds, whether or not runs lists r.
	held := r.GPUs
	for _, o := range u.Runs {
		if o.RunID != r.RunID {
			held += o.GPUs
		}
	}
	more := a.StageGPUs - r.GPUs
	if held+more <= r.BookedGPUs {
		return nil
	}
	e := &CapacityError{BookingID: r.BookingID, BookedGPUs: r.BookedGPUs, HeldGPUs: held, WantGPUs: more,
		RunID: r.RunID, RunGPUs: r.GPUs, StageGPUs: a.StageGPUs}
	for _, o := range u.Runs {
		if o.Account == a.Account {
			e.Runs = append(e.Runs, o)
		}
	}
	return e
}

// CheckBindings is the binding rule every store applies inside Commit's
// transaction, whatever the policy decided: the confirmation c may be
// consumed by a only if c was issued for a's account, action and booking,
// for train.create for a's manifest digest, for train.cancel/cleanup for
// a's run, carries a's jti, and its cost covers a's estimated cost. A
// mismatch is ErrConfirmationMismatch; a cost below the estimate is
// ErrCostExceeded.
func CheckBindings(c Confirmation, a Admission) error {
	mismatch := func(what string) error {
		return fmt.Errorf("ledger: commit: confirmation %s differs: %w", what, ErrConfirmationMismatch)
	}
	switch {
	case c.Account != a.Account:
		return mismatch("account")
	case c.Action != a.Action:
		return mismatch("action")
	case c.JTI != a.ConfirmationJTI:
		return mismatch("jti")
	case c.BookingID != a.BookingID:
		return mismatch("booking")
	}
	spec, _ := a.Action.Spec()
	if spec.Effect == api.EffectCreateRun && c.ManifestDigest != a.ManifestDigest {
		return mismatch("manifest digest")
	}
	if a.Action.ActsOnRun() && c.RunID != a.RunID {
		return mismatch("run id")
	}
	if a.CostMicroUSD > c.CostMicroUSD {
		return fmt.Errorf("ledger: commit: estimated cost %d µUSD above the confirmed %d µUSD: %w",
			a.CostMicroUSD, c.CostMicroUSD, ErrCostExceeded)
	}
	return nil
}

// CheckHeld is the checkers' (fsck) capacity invariant over one booking's
// runs: at each run's admission, and at each stage advance that grew a
// run, the GPUs the runs live at that instant held then (itself included;
// HeldAt over their events) are at most the GPUs it was admitted against,
// and at each admission their checkpoint GiB at most the checkpoint quota
// it was admitted under (when one was known). events holds the runs'
// events by run id (only those that set GPUs matter: GPUEvent); a run
// without any holds its record's GPUs throughout. It returns one line per
// violation.
func CheckHeld(runs []RunRecord, events map[string][]RunEvent) []string {
	var out []string
	heldAt := func(t time.Time) (held int, gib int64) {
		for _, o := range runs {
			// Every overlapping pair is counted at the later of the two
			// instants (an admission or a grow).
			if !o.AdmittedAt.After(t) && o.Live(t) {
				held += HeldAt(o, events[o.RunID], t)
				gib += o.Plan.CheckpointGiB
			}
		}
		return held, gib
	}
	for _, r := range runs {
		held, gib := heldAt(r.AdmittedAt)
		if held > r.BookedGPUs {
			out = append(out, fmt.Sprintf("at run %s's admission %d GPUs were held, %d booked", r.RunID, held, r.BookedGPUs))
		}
		if q := r.Plan.StorageQuotaGiB; q > 0 && gib > q {
			out = append(out, fmt.Sprintf("at run %s's admission %d GiB of checkpoints were kept, %d GiB quota", r.RunID, gib, q))
		}
		for _, e := range events[r.RunID] {
			if !GPUEvent(e) || !movesStage(e.Action) {
				continue
			}
			if held, _ := heldAt(e.At); held > r.BookedGPUs {
				out = append(out, fmt.Sprintf("when run %s grew to %d GPUs (decision %s) %d GPUs were held, %d booked",
					r.RunID, e.GPUs, e.DecisionID, held, r.BookedGPUs))
			}
		}
	}
	return out
}

// GPUEvent reports whether e set its run's GPUs: a train.create, or a
// stage advance that grew the run (RunEvent.GPUs).
func GPUEvent(e RunEvent) bool { return e.GPUs > 0 }

// HeldAt is the GPUs r held at t by its events (GPUEvent: what its create
// admitted and each grow after it, never fewer): the most any event at or
// before t set; r.GPUs when none of them says (events from before the
// ledger recorded GPUs on them, or none given).
func HeldAt(r RunRecord, events []RunEvent, t time.Time) int {
	held := 0
	for _, e := range events {
		if GPUEvent(e) && !e.At.After(t) {
			held = max(held, e.GPUs)
		}
	}
	if held == 0 {
		return r.GPUs
	}
	return held
}

// CheckRunStep is the ledger's own check of a train.stage.advance or
// train.restart against the run it acts on, whatever the policy decided:
// the run is the admission's account's, on its booking (else
// ErrConfirmationMismatch), may do the action at a.CreatedAt (RunRecord.May:
// else ErrRunEnded, ErrRevoked or ErrRunHalted) and, for an advance, is
// still in a.FromStage (else ErrStageConflict: another advance won) and,
// for a restart, passes CheckRestart (else ErrRestartOffPlan or
// ErrRestartBudget). Stores call it inside the commit, where the run cannot
// change.
func CheckRunStep(r RunRecord, a Admission) error {
	if r.Account != a.Account || r.BookingID != a.BookingID {
		return fmt.Errorf("ledger: commit: run of another booking or account: %w", ErrConfirmationMismatch)
	}
	if err := r.May(a.Action, a.CreatedAt); err != nil {
		return fmt.Errorf("ledger: commit: %w", err)
	}
	if movesStage(a.Action) && r.Stage != a.FromStage {
		return fmt.Errorf("ledger: commit: %w", ErrStageConflict)
	}
	return CheckRestart(r, a)
}

// RunPlan is what a run's manifest says about its restarts, recorded by its
// train.create: the checkpoint interval and the run's steps (a restart may
// only start from a step the plan writes: CheckRestart), its declared
// wall-clock seconds and the work a restart is expected to lose (the
// checkpoint gate's lost-work estimate), which price the restart budget.
// All zero: no plan recorded.
type RunPlan struct {
	// IntervalSteps is checkpoint.interval_steps; Steps the run's steps:
	// objective.max_steps, or ceil(max_tokens / (global batch × sequence
	// length)) when that is smaller (a run bounded by tokens counts the
	// optimizer steps its tokens take), counted across its stages.
	IntervalSteps, Steps int64
	// WallClockSeconds is budget.max_wall_clock_hours × 3600;
	// LostSecondsPerRestart the expected work lost per failure (half an
	// interval + detection + resume), rounded up.
	WallClockSeconds, LostSecondsPerRestart int64
	// CheckpointGiB is the checkpoint storage the run keeps (checkpoint size
	// × retention, GiB rounded up) in its booking's store;
	// StorageQuotaGiB the booking's checkpoint quota when it was admitted
	// (0: none known, nothing is checked). The booking's live runs together
	// keep at most the quota (CheckCapacity).
	CheckpointGiB, StorageQuotaGiB int64
}

// Known reports whether a plan was recorded.
func (p RunPlan) Known() bool { return p.IntervalSteps > 0 && p.Steps > 0 }

// Writes reports whether the plan writes a checkpoint at step: a positive
// multiple of the interval within the run's steps.
func (p RunPlan) Writes(step int64) bool {
	return step > 0 && step <= p.Steps && step%p.IntervalSteps == 0
}

// Validate reports whether p may be recorded. The error wraps ErrInvalid.
func (p RunPlan) Validate() error {
	if p.IntervalSteps < 0 || p.Steps < 0 || p.WallClockSeconds < 0 || p.LostSecondsPerRestart < 0 ||
		(p.IntervalSteps == 0) != (p.Steps == 0) {
		return fmt.Errorf("ledger: run plan %+v is negative or half set: %w", p, ErrInvalid)
	}
	return nil
}

// Errors of a restart against the run's plan.
var (
	// ErrRestartOffPlan: a train.restart from a step the run's checkpoint
	// plan never writes (see RestartError). Nothing was written.
	ErrRestartOffPlan = errors.New("restart step is not a checkpoint of the run")
	// ErrRestartBudget: a train.restart past the run's restart budget (see
	// RestartError). Nothing was written.
	ErrRestartBudget = errors.New("restart budget exhausted")
)

// RestartError names the figures of a refused restart. It wraps
// ErrRestartOffPlan or ErrRestartBudget.
type RestartError struct {
	Step     int64
	Plan     RunPlan
	Restarts int // admitted before this one
	Budget   int // the most restarts the run may have
	err      error
}

func (e *RestartError) Error() string {
	if e.err == ErrRestartBudget {
		return fmt.Sprintf("ledger: commit: restart %d of the run, its budget is %d: %v", e.Restarts+1, e.Budget, e.err)
	}
	return fmt.Sprintf("ledger: commit: step %d is no checkpoint of a run writing one every %d of %d steps: %v",
		e.Step, e.Plan.IntervalSteps, e.Plan.Steps, e.err)
}

func (e *RestartError) Unwrap() error { return e.err }

// CheckRestart is the ledger's own check of a train.restart a against its
// run r, whatever the policy decided: its step must be one r's plan
// writes (when r has a plan), and r may have had at most a.RestartBudget-1
// restarts before it (when the decision gave a budget). Stores call it
// inside the commit (CheckRunStep), where two racing restarts serialize.
func CheckRestart(r RunRecord, a Admission) error {
	if spec, _ := a.Action.Spec(); !spec.CheckpointStep {
		return nil
	}
	if r.Plan.Known() && !r.Plan.Writes(a.CheckpointStep) {
		return &RestartError{Step: a.CheckpointStep, Plan: r.Plan, Restarts: r.Restarts, Budget: a.RestartBudget, err: ErrRestartOffPlan}
	}
	if a.RestartBudget > 0 && r.Restarts >= a.RestartBudget {
		return &RestartError{Step: a.CheckpointStep, Plan: r.Plan, Restarts: r.Restarts, Budget: a.RestartBudget, err: ErrRestartBudget}
	}
	return nil
}

// Stepped is r after the step a (CheckRunStep and CheckGrow passed): an
// advance moves its stage, records when the new stage's eval report is
// due (a.ReportDue), forgets the report of the stage it left and grows
// the run's GPUs to a.StageGPUs when that is larger (never shrinks them);
// a restart counts and records its step.
func Stepped(r RunRecord, a Admission) RunRecord {
	spec, _ := a.Action.Spec()
	if spec.Stage {
		r.Stage, r.ReportDue, r.Report = a.Stage, a.ReportDue, RunReport{}
		r.GPUs = max(r.GPUs, a.StageGPUs)
	}
	if spec.CheckpointStep {
		r.Restarts++
		r.LastCheckpointStep = a.CheckpointStep
	}
	return r
}

// CheckBookingAccount is the binding rule every store applies inside
// Commit's transaction: a booking bound to an account (bound, the account
// of its first admission) admits nothing of another account.
func CheckBookingAccount(bound string, a Admission) error {
	if bound != "" && bound != a.Account {
		return fmt.Errorf("ledger: commit: booking %s: %w", a.BookingID, ErrBookingAccount)
	}
	return nil
}

// movesStage reports whether the action moves its run's stage (it carries
// the stage it moves to: a stage advance).
func movesStage(a api.Action) bool {
	spec, _ := a.Spec()
	return spec.Stage
}
