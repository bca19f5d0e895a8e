// Package ledger defines itogate's only state: deposited confirmations, the
// admissions that consumed them, the runs they created (run.go) and
// revocations (revocation.go) (docs/architecture.md §3).
//
// The Store interface is what the server depends on; implementations live in
// sub-packages (bolt, the embedded default for one process; postgres, for
// several replicas sharing one database) and must all pass the conformance
// suite in ledgertest. Every implementation keeps these
// invariants:
//
//   - a confirmation is consumed at most once, ever, also after its token
//     expired and was swept;
//   - consuming the confirmation, reserving the idempotency key and writing the
//     admission happen in one transaction, or none of them does;
//   - the same (account, idempotency key) with the same request digest returns
//     the stored admission and consumes nothing; with another digest it fails
//     with ErrKeyConflict;
//   - a jti or reference, once deposited, can never be deposited again;
//   - a confirmation is consumed only by the admission it binds
//     (CheckBindings) and never while something it rests on is revoked;
//   - a booking never holds more GPUs than it booked, nor its live runs
//     more checkpoint storage than its quota (CheckCapacity at commit,
//     and CheckGrow for a stage advance that grows its run, serialized
//     per booking; CheckHeld in every Checker);
//   - a booking belongs to the account of its first admission
//     (CheckBookingAccount at commit);
//   - a run is in one state (RunRecord.State) and moves only by an
//     admission, a revocation or a halt, each written with the event
//     that records it (RunEvent) in the same transaction; every stage
//     advance and restart was admissible (RunRecord.May) when it committed
//     (CheckEvents in every Checker);
//   - a run whose stage has a report deadline (RunRecord.ReportDue) counts
//     as halted from the deadline on unless a passing eval report for the
//     stage was recorded before it (RecordReport; RunRecord.Overdue).
//
// A deny writes nothing to the ledger but a halt: a signed eval report that
// fails its stage's gate halts the run (HaltRun), consuming nothing —
// whether the run's holder presents it with a stage advance or the eval
// authority posts it directly.
package ledger

import (
	"context"
	"errors"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
)

// Errors returned by Store methods. Implementations wrap them, so test with
// errors.Is.
var (
	// ErrNotFound: no confirmation with that reference, no admission for that
	// (account, key), or no run with that id.
	ErrNotFound = errors.New("not found")
	// ErrConfirmationConsumed: the confirmation was already consumed by an
	// admission (any account, any key). It never becomes available again.
	ErrConfirmationConsumed = errors.New("confirmation already consumed")
	// ErrConfirmationExpired: the confirmation's token expired and was swept
	// before anything consumed it; only its tombstone is left.
	ErrConfirmationExpired = errors.New("confirmation expired and swept")
	// ErrConfirmationMismatch: the confirmation exists but its account,
	// action, jti, booking, manifest digest (train.create) or run id
	// (cancel/cleanup) differ from the admission's (see CheckBindings).
	// Policy already requires them to match; the ledger refuses too, so a
	// faulty bundle can never spend a confirmation on something it was not
	// issued for. Nothing was written.
	ErrConfirmationMismatch = errors.New("confirmation does not match the admission")
	// ErrCostExceeded: the admission's estimated cost is above the
	// confirmation's bound cost. Nothing was written.
	ErrCostExceeded = errors.New("estimated cost above the confirmed cost")
	// ErrCapacityExceeded: a train.create, or a train.stage.advance
	// growing its run to a larger stage, would hold more GPUs than its
	// booking has (see CheckCapacity, CheckGrow and CapacityError).
	// Nothing was written.
	ErrCapacityExceeded = errors.New("booking capacity exceeded")
	// ErrStorageQuotaExceeded: a train.create's checkpoints and those of
	// its booking's live runs would exceed the booking's checkpoint storage
	// quota (see CheckCapacity and StorageQuotaError). Nothing was written.
	ErrStorageQuotaExceeded = errors.New("booking checkpoint storage quota exceeded")
	// ErrBookingReleased: a train.create on a booking a booking.release
	// admission released. Nothing was written.
	ErrBookingReleased = errors.New("booking released")
	// ErrRevoked: the confirmation, entitlement, booking or caller key the
	// admission rests on was revoked, or the run it steps was revoked with
	// its booking or entitlement (see RevocationError). Nothing was written.
	ErrRevoked = errors.New("revoked")
	// ErrStageConflict: a train.stage.advance whose FromStage is not the
	// run's recorded stage (another advance won the race). Stages only move
	// forward, one step per admission. Nothing was written.
	ErrStageConflict = errors.New("run stage changed")
	// ErrRunEnded: a train.stage.advance or train.restart of a run that
	// ended (RunRecord.State: cancelled, cleaned up, released or past its
	// declared end; see RunEndedError). Nothing was written.
	ErrRunEnded = errors.New("run ended")
	// ErrConfirmationDuplicate: a confirmation with that reference or that jti
	// was deposited before (it may since have been consumed or swept).
	ErrConfirmationDuplicate = errors.New("confirmation already deposited")
	// ErrKeyConflict: the (account, idempotency key) already holds an
	// admission for a request with another digest. The server answers 409.
	ErrKeyConflict = errors.New("idempotency key reused with a different request")
	// ErrInvalid: the record handed to the store is malformed (a caller bug,
	// not a policy outcome). Nothing was written.
	ErrInvalid = errors.New("invalid ledger record")
	// ErrUnavailable: the store could not be read or written (I/O, lock
	// timeout, closed store, corrupt record). Every store fault wraps it; the
	// server denies with a coded 503. From Commit it means the outcome is
	// unknown (an fsync can fail after the write reached the disk): a retry
	// with the same idempotency key, or Admission, finds out.
	ErrUnavailable = errors.New("ledger unavailable")
)

// Store is the ledger. Implementations are safe for concurrent use.
//
// Every method checks ctx before it starts; a cancelled or expired ctx
// returns an error wrapping ctx.Err() (not ErrUnavailable) and writes
// nothing. A ctx that ends while a Commit is already in the store's hands
// may leave its outcome unknown; the error then wraps ErrUnavailable as well
// (the server commits with a ctx that is never cancelled, so only the
// store's own bounds apply). Times are returned in UTC; implementations keep
// at least microsecond precision.
type Store interface {
	// DepositConfirmation stores a new, available confirmation. c.State must
	// be empty or ConfirmationAvailable and the consumption fields empty (see
	// Confirmation.Validate). A reference or jti seen before, even one long
	// consumed or swept, returns ErrConfirmationDuplicate.
	DepositConfirmation(ctx context.Context, c Confirmation) error

	// Confirmation returns the confirmation with that reference, or
	// ErrNotFound. After Sweep a tombstone is returned: Token is nil and State
	// is consumed or expired.
	Confirmation(ctx context.Context, ref string) (Confirmation, error)

	// Admission returns the admission stored under (account, key), or
	// ErrNotFound.
	Admission(ctx context.Context, account, key string) (Admission, error)

	// Commit writes an allowed admission in one transaction (the commit
	// stage of docs/architecture.md §1), checking in this order:
	//
	//   - (a.Account, a.IdempotencyKey) already holds an admission: with the
	//     same RequestDigest it returns that stored admission and
	//     replayed=true, writing and consuming nothing; with another digest it
	//     returns ErrKeyConflict.
	//   - the confirmation a.ConfirmationRef must exist (else ErrNotFound)
	//     and pass CheckBindings (else ErrConfirmationMismatch or
	//     ErrCostExceeded);
	//   - the booking must be unbound or bound to a.Account
	//     (CheckBookingAccount, else ErrBookingAccount); the first admission
	//     on a booking binds it to its account;
	//   - none of RevocationSubjects(a) may be revoked (else a
	//     *RevocationError, ErrRevoked);
	//   - the confirmation must be available (else ErrConfirmationConsumed
	//     or ErrConfirmationExpired); it is marked consumed by
	//     a.IdempotencyKey at a.CreatedAt;
	//   - train.create must pass CheckCapacity against the booking's runs
	//     (else a *CapacityError, ErrCapacityExceeded, a
	//     *StorageQuotaError, ErrStorageQuotaExceeded, or
	//     ErrBookingReleased);
	//   - train.stage.advance and train.restart need the run's RunRecord
	//     (else ErrNotFound) and pass CheckRunStep (RunRecord.May at
	//     a.CreatedAt: else ErrRunEnded, ErrRevoked or ErrRunHalted; an
	//     advance in a.FromStage, else ErrStageConflict); an advance into
	//     a stage larger than the run (Grows) must pass CheckGrow against
	//     the booking's runs (else a *CapacityError, ErrCapacityExceeded);
	//   - the admission is written; train.create writes its RunRecord (with
	//     a.Stage as the run's stage and a.EntitlementJTI),
	//     train.cancel/cleanup end the run a.RunID (if it was live),
	//     train.stage.advance moves its stage to a.Stage (and grows its
	//     GPUs to a.StageGPUs when larger: Stepped), train.restart
	//     counts a restart from a.CheckpointStep (Stepped), booking.release
	//     marks the booking released and ends its live runs; each run the
	//     admission acts on gets its RunEvent (AdmissionEvent).
	//
	// Commits on one booking are serialized, so the capacity rule holds
	// across processes sharing a store.
	//
	// On any other error nothing is written, except that after
	// ErrUnavailable the outcome is unknown (see there). a must pass
	// Admission.Validate, else ErrInvalid.
	Commit(ctx context.Context, a Admission) (stored Admission, replayed bool, err error)

	// Run returns the admission that created runID (the train.create one,
	// State api.StateAdmitted), or ErrNotFound. The server uses it to check a
	// cancel or cleanup targets a run of the caller's own account.
	Run(ctx context.Context, runID string) (Admission, error)

	// RunRecord returns the run record of runID, or ErrNotFound. Use its
	// Live method for "is this run live now".
	RunRecord(ctx context.Context, runID string) (RunRecord, error)

	// RunEvents returns the run's events (its transitions) in the order
	// they were written, at most MaxRunEvents; none for an unknown run.
	RunEvents(ctx context.Context, runID string) ([]RunEvent, error)

	// Runs returns q.Account's runs (on q.BookingID when set) whose run id
	// is after q.After, in run id order (the order they were admitted in),
	// at most q.Limit; more says whether any is left after the last one.
	// q must pass RunQuery.Validate, else ErrInvalid.
	Runs(ctx context.Context, q RunQuery) (runs []RunRecord, more bool, err error)

	// HaltRun records that a failed eval gate halted the run h.RunID, in
	// one transaction and serialized with the commits on its booking: the
	// run must exist (else ErrNotFound) and pass CheckHalt (else
	// ErrConfirmationMismatch, ErrRunEnded, ErrRevoked or
	// ErrStageConflict, writing nothing); it gets h as its Halt and a
	// HaltEvent. A run already halted keeps its first halt: halted is
	// false and nothing is written. No confirmation is consumed. h must
	// pass Halt.Validate, else ErrInvalid. It returns the run as stored
	// afterwards.
	HaltRun(ctx context.Context, h Halt) (run RunRecord, halted bool, err error)

	// RecordReport records that a passing eval report for the run's
	// current stage reached the ledger (the eval authority's direct post),
	// in one transaction serialized with the commits on its booking: the
	// run must exist (else ErrNotFound) and pass CheckRecordReport (else
	// ErrConfirmationMismatch, ErrRunEnded, ErrRevoked, ErrRunHalted —
	// also ErrReportOverdue past the stage's deadline — or
	// ErrStageConflict, writing nothing); it gets p as its Report and a
	// ReportEvent, which keep it live past the stage's report deadline. A
	// run with a report already recorded for the stage keeps the first:
	// recorded is false and nothing is written. p must pass
	// Report.Validate, else ErrInvalid. It returns the run as stored
	// afterwards.
	RecordReport(ctx context.Context, p Report) (run RunRecord, recorded bool, err error)

	// BookingUsage returns the booking's live runs at now, the account it
	// is bound to and whether it was released (the policy's
	// input.ledger.booking, metrics).
	BookingUsage(ctx context.Context, bookingID string, now time.Time) (BookingUsage, error)

	// Revoke stores r. It is idempotent: revoking a (Kind, Subject) that is
	// already revoked returns the stored revocation and created=false. In
	// the same transaction, serialized with the commits on the bookings it
	// touches, a booking or entitlement revocation (RevokesRuns) revokes
	// every run of the booking, or admitted under the entitlement, that is
	// live at r.RevokedAt and not revoked yet: each gets a RunRevocation
	// and a RevocationEvent (also when the revocation was stored before).
	// r must pass Revocation.Validate, else ErrInvalid.
	Revoke(ctx context.Context, r Revocation) (stored Revocation, created bool, err error)

	// Revoked returns the revocation of (kind, subject), or ErrNotFound.
	// A revoked run says so itself (RunRecord.State), after the revocation
	// is swept too.
	Revoked(ctx context.Context, kind RevocationKind, subject string) (Revocation, error)

	// Sweep drops the token of every confirmation whose ExpiresAt is before
	// now-leeway, keeping a tombstone of its reference, jti, account, action
	// and state: a consumed confirmation stays consumed, an available one
	// becomes ConfirmationExpired, and neither its reference nor its jti can
	// be deposited again. It also drops revocations whose ExpiresAt is
	// before now-leeway (the token they name can no longer verify).
	// Admissions are never swept (they back idempotent replays). It returns how many tokens it removed; on error some may have
	// been removed already, which is safe to repeat.
	Sweep(ctx context.Context, now time.Time, leeway time.Duration) (swept int, err error)

	// Ping reports whether the store can serve reads (for /readyz).
	Ping(ctx context.Context) error

	// Close releases the store. Later calls on it return ErrUnavailable;
	// calling Close again returns nil.
	Close() error
}

// ConfirmationState is the lifecycle of a deposited confirmation. It only
// moves forward: available → consumed, or available → expired.
type ConfirmationState string

const (
	// ConfirmationAvailable: deposited, not yet consumed, token kept.
	ConfirmationAvailable ConfirmationState = "available"
	// ConfirmationConsumed: consumed by one admission (ConsumedBy). Final.
	ConfirmationConsumed ConfirmationState = "consumed"
	// ConfirmationExpired: swept before anything consumed it; the token is
	// gone and it can never be consumed. Final.
	ConfirmationExpired ConfirmationState = "expired"
)

// Confirmation is a deposited confirmation token (docs/architecture.md §2, Claims) and its state.
type Confirmation struct {
	// Ref is the opaque reference handed back on deposit: "cfr_" + 32
	// lowercase hex (128 random bits), from NewConfirmationRef.
	Ref string
	// JTI is the token's jti; unique across every confirmation ever
	// deposited.
	JTI string
	// Account is the token's sub.
	Account string
	// Action is the token's act, e.g. "train.create".
	Action api.Action
	// Token is the compact JWS as deposited; it is verified again at use.
	// Nil in a swept tombstone.
	Token []byte
	// ExpiresAt is the token's exp.
	ExpiresAt time.Time
	// DepositedAt is when the authority deposited it.
	DepositedAt time.Time
	State       ConfirmationState
	// ConsumedBy is the idempotency key of the admission that consumed it.
	ConsumedBy string
	// ConsumedAt is the consuming admission's CreatedAt; zero until consumed.
	ConsumedAt time.Time

	// What the token binds it to, recorded at deposit from its verified
	// claims and re-checked by Commit (CheckBindings) whatever the policy
	// said: booking_id; manifest_digest (train.create); run_id
	// (train.cancel, train.cleanup); cost_usd in micro-USD.
	BookingID      string
	ManifestDigest string
	RunID          string
	CostMicroUSD   int64
}

// Admission is an allowed admission, stored under (Account, IdempotencyKey).
// Only allows are stored; a deny writes nothing.
type Admission struct {
	// Account and IdempotencyKey form the primary key: keys are scoped per
	// account, so two accounts may use the same key.
	Account        string
	IdempotencyKey string
	// RequestDigest is "sha256:<64 hex>" over the request (see
	// docs/policy-input.md); a replay must carry the same digest.
	RequestDigest string
	DecisionID    string
	// RunID is, for train.create, the new run ("run_" + 26 characters, from
	// NewRunID); for cancel and cleanup, the target run; empty for
	// booking.release.
	RunID           string
	Action          api.Action
	BookingID       string
	ManifestDigest  string
	ConfirmationRef string
	ConfirmationJTI string
	BundleRevision  string
	State           api.AdmissionState
	// CreatedAt is the decision time; it also stamps ConsumedAt and is the
	// "now" of the capacity check.
	CreatedAt time.Time

	// EntitlementJTI and CallerKeyID name the entitlement token and the
	// caller key the admission rests on, for the revocation check at
	// commit.
	EntitlementJTI string
	CallerKeyID    string
	// CostMicroUSD is the run's estimated cost (train.create; 0 otherwise)
	// that the confirmation's cost must cover.
	CostMicroUSD int64
	// For train.create: the GPUs the run holds (its world size), the
	// booking's GPUs, and when the run stops holding them (declared end +
	// grace). Zero for other actions.
	GPUs       int
	BookedGPUs int
	LiveUntil  time.Time
	// Ticket is the admission ticket (compact JWS, package ticket) signed
	// for an allowed train.create, stored in the same transaction so that a
	// replay and a status lookup hand back the very same ticket; empty for
	// other actions and when tickets are not configured.
	Ticket string
	// Stage is, for train.create, the run's first stage (its manifest's
	// objective.stage; may be empty) and, for train.stage.advance, the stage
	// the run moves to; FromStage is the stage an advance leaves.
	Stage     string
	FromStage string
	// CheckpointStep is the step a train.restart restarts from.
	CheckpointStep int64

	// Plan (train.create) is the run's checkpoint plan, recorded on its
	// RunRecord; RestartBudget (train.restart) the most restarts the run
	// may have, this one included (0: no budget), from the decision. Both
	// are inputs of the commit, not stored with the admission: a stored or
	// replayed admission has them zero.
	Plan          RunPlan
	RestartBudget int
	// StageGPUs (train.stage.advance) is the world size of the stage the
	// advance enters (its effective manifest's hardware.nodes ×
	// hardware.gpus_per_node; 0: not known, the run keeps its GPUs). A run
	// holding fewer grows to it in the commit when its booking has the
	// difference free (CheckGrow); a run holding as many or more keeps
	// its own (a run never shrinks). An input of the commit like Plan: a
	// stored or replayed admission has it zero.
	StageGPUs int
	// ReportDue (train.create, train.stage.advance) is when the eval report
	// of the stage the admission enters is due (the decision time + the
	// stage's report deadline from the decision; zero: no deadline),
	// recorded on the run (RunRecord.ReportDue). An input of the commit
	// like Plan: a stored or replayed admission has it zero.
	ReportDue time.Time
}
