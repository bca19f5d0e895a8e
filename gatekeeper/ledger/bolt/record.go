package bolt

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// The on-disk records are their own types, with explicit JSON names, so a
// rename in the ledger package can never silently change the file format.

type confirmationRecord struct {
	Ref         string                   `json:"ref"`
	JTI         string                   `json:"jti"`
	Account     string                   `json:"account"`
	Action      string                   `json:"action"`
	Token       []byte                   `json:"token,omitempty"` // base64: tokens are bytes, not text
	ExpiresAt   time.Time                `json:"expires_at"`
	DepositedAt time.Time                `json:"deposited_at"`
	State       ledger.ConfirmationState `json:"state"`
	ConsumedBy  string                   `json:"consumed_by,omitempty"`
	ConsumedAt  time.Time                `json:"consumed_at,omitzero"`
	// Bindings (schema 1 files written before they existed lack them, and
	// such a confirmation matches no admission: it fails closed).
	BookingID      string `json:"booking_id,omitempty"`
	ManifestDigest string `json:"manifest_digest,omitempty"`
	RunID          string `json:"run_id,omitempty"`
	CostMicroUSD   int64  `json:"cost_micro_usd,omitempty"`
}

type admissionRecord struct {
	Account         string             `json:"account"`
	IdempotencyKey  string             `json:"idempotency_key"`
	RequestDigest   string             `json:"request_digest"`
	DecisionID      string             `json:"decision_id,omitempty"`
	RunID           string             `json:"run_id,omitempty"`
	Action          string             `json:"action"`
	BookingID       string             `json:"booking_id,omitempty"`
	ManifestDigest  string             `json:"manifest_digest,omitempty"`
	ConfirmationRef string             `json:"confirmation_ref"`
	ConfirmationJTI string             `json:"confirmation_jti"`
	BundleRevision  string             `json:"bundle_revision,omitempty"`
	State           api.AdmissionState `json:"state"`
	CreatedAt       time.Time          `json:"created_at"`
	EntitlementJTI  string             `json:"entitlement_jti,omitempty"`
	CallerKeyID     string             `json:"caller_key_id,omitempty"`
	CostMicroUSD    int64              `json:"cost_micro_usd,omitempty"`
	GPUs            int                `json:"gpus,omitempty"`
	BookedGPUs      int                `json:"booked_gpus,omitempty"`
	LiveUntil       time.Time          `json:"live_until,omitzero"`
	Ticket          string             `json:"ticket,omitempty"`
	Stage           string             `json:"stage,omitempty"`
	FromStage       string             `json:"from_stage,omitempty"`
	CheckpointStep  int64              `json:"checkpoint_step,omitempty"`
}

type runRecord struct {
	RunID          string    `json:"run_id"`
	Account        string    `json:"account"`
	BookingID      string    `json:"booking_id"`
	ManifestDigest string    `json:"manifest_digest"`
	GPUs           int       `json:"gpus"`
	BookedGPUs     int       `json:"booked_gpus"`
	AdmittedAt     time.Time `json:"admitted_at"`
	LiveUntil      time.Time `json:"live_until"`
	EndedAt        time.Time `json:"ended_at,omitzero"`
	EndedBy        string    `json:"ended_by,omitempty"`
	Stage          string    `json:"stage,omitempty"`
	// Schema 3: the run's state beyond how it ended.
	EntitlementJTI     string            `json:"entitlement_jti,omitempty"`
	Restarts           int               `json:"restarts,omitempty"`
	LastCheckpointStep int64             `json:"last_checkpoint_step,omitempty"`
	Halt               *haltRecord       `json:"halt,omitempty"`
	Revocation         *runRevocationRec `json:"revocation,omitempty"`
	// The run's checkpoint plan, added to schema 3 records without a version
	// change: a record without it has no plan (ledger.RunPlan.Known).
	Plan *planRecord `json:"plan,omitempty"`
	// Schema 6: when the current stage's eval report is due and the
	// passing report recorded for it (a record without them has neither).
	ReportDue time.Time     `json:"report_due,omitzero"`
	Report    *reportRecord `json:"report,omitempty"`
}

type reportRecord struct {
	At           time.Time `json:"at"`
	DecisionID   string    `json:"decision_id"`
	Stage        string    `json:"stage"`
	ReportDigest string    `json:"report_digest"`
	By           string    `json:"by"`
}

type planRecord struct {
	IntervalSteps         int64 `json:"interval_steps"`
	Steps                 int64 `json:"steps"`
	WallClockSeconds      int64 `json:"wall_clock_seconds"`
	LostSecondsPerRestart int64 `json:"lost_seconds_per_restart"`
	// Added without a version change: a record without them keeps no
	// checkpoint storage and had no quota (0).
	CheckpointGiB   int64 `json:"checkpoint_gib,omitempty"`
	StorageQuotaGiB int64 `json:"storage_quota_gib,omitempty"`
}

type haltRecord struct {
	At           time.Time `json:"at"`
	DecisionID   string    `json:"decision_id"`
	Stage        string    `json:"stage"`
	ReportDigest string    `json:"report_digest"`
	FailedEvals  []string  `json:"failed_evals"`
	By           string    `json:"by"`
}

type runRevocationRec struct {
	At         time.Time             `json:"at"`
	Kind       ledger.RevocationKind `json:"kind"`
	Subject    string                `json:"subject"`
	By         string                `json:"by"`
	Reason     string                `json:"reason,omitempty"`
	DecisionID string                `json:"decision_id,omitempty"`
}

// eventRecord is one run event (bucket runevents).
type eventRecord struct {
	At             time.Time `json:"at"`
	To             string    `json:"to,omitempty"`
	Action         string    `json:"action,omitempty"`
	DecisionID     string    `json:"decision_id,omitempty"`
	By             string    `json:"by,omitempty"`
	Reason         string    `json:"reason,omitempty"`
	Stage          string    `json:"stage,omitempty"`
	CheckpointStep int64     `json:"checkpoint_step,omitempty"`
	ReportDue      time.Time `json:"report_due,omitzero"` // schema 6
	GPUs           int       `json:"gpus,omitempty"`      // schema 7
}

type bookingRecord struct {
	// Account is the account of the booking's first admission (schema 3);
	// BoundAt that admission's decision time.
	Account    string    `json:"account,omitempty"`
	BoundAt    time.Time `json:"bound_at,omitzero"`
	ReleasedAt time.Time `json:"released_at,omitzero"`
	ReleasedBy string    `json:"released_by,omitempty"` // idempotency key of the release
}

type revocationRecord struct {
	Kind       ledger.RevocationKind `json:"kind"`
	Subject    string                `json:"subject"`
	Reason     string                `json:"reason,omitempty"`
	RevokedBy  string                `json:"revoked_by"`
	RevokedAt  time.Time             `json:"revoked_at"`
	ExpiresAt  time.Time             `json:"expires_at"`
	DecisionID string                `json:"decision_id,omitempty"`
}

func (r runRecord) run() ledger.RunRecord {
	out := ledger.RunRecord{
		RunID: r.RunID, Account: r.Account, BookingID: r.BookingID, ManifestDigest: r.ManifestDigest,
		GPUs: r.GPUs, BookedGPUs: r.BookedGPUs, AdmittedAt: r.AdmittedAt.UTC(), LiveUntil: r.LiveUntil.UTC(),
		EndedAt: utcOrZero(r.EndedAt), EndedBy: api.Action(r.EndedBy), Stage: r.Stage,
		EntitlementJTI: r.EntitlementJTI, Restarts: r.Restarts, LastCheckpointStep: r.LastCheckpointStep,
		ReportDue: utcOrZero(r.ReportDue),
	}
	if p := r.Report; p != nil {
		out.Report = ledger.RunReport{At: p.At.UTC(), DecisionID: p.DecisionID, Stage: p.Stage,
			ReportDigest: p.ReportDigest, By: p.By}
	}
	if h := r.Halt; h != nil {
		out.Halt = ledger.RunHalt{At: h.At.UTC(), DecisionID: h.DecisionID, Stage: h.Stage, ReportDigest: h.ReportDigest,
			FailedEvals: h.FailedEvals, By: h.By}
	}
	if p := r.Plan; p != nil {
		out.Plan = ledger.RunPlan{IntervalSteps: p.IntervalSteps, Steps: p.Steps, WallClockSeconds: p.WallClockSeconds,
			LostSecondsPerRestart: p.LostSecondsPerRestart, CheckpointGiB: p.CheckpointGiB, StorageQuotaGiB: p.StorageQuotaGiB}
	}
	if v := r.Revocation; v != nil {
		out.Revocation = ledger.RunRevocation{At: v.At.UTC(), Kind: v.Kind, Subject: v.Subject, By: v.By,
			Reason: v.Reason, DecisionID: v.DecisionID}
	}
	return out
}

func planToRecord(p ledger.RunPlan) *planRecord {
	if p == (ledger.RunPlan{}) {
		return nil
	}
	return &planRecord{IntervalSteps: p.IntervalSteps, Steps: p.Steps, WallClockSeconds: p.WallClockSeconds,
		LostSecondsPerRestart: p.LostSecondsPerRestart, CheckpointGiB: p.CheckpointGiB, StorageQuotaGiB: p.StorageQuotaGiB}
}

func reportToRecord(p ledger.RunReport) *reportRecord {
	if p.At.IsZero() {
		return nil
	}
	return &reportRecord{At: p.At.UTC(), DecisionID: p.DecisionID, Stage: p.Stage, ReportDigest: p.ReportDigest, By: p.By}
}

func haltToRecord(h ledger.RunHalt) *haltRecord {
	return &haltRecord{At: h.At.UTC(), DecisionID: h.DecisionID, Stage: h.Stage, ReportDigest: h.ReportDigest,
		FailedEvals: h.FailedEvals, By: h.By}
}

func runRevocationToRecord(r ledger.Revocation) *runRevocationRec {
	return &runRevocationRec{At: r.RevokedAt.UTC(), Kind: r.Kind, Subject: r.Subject, By: r.RevokedBy,
		Reason: r.Reason, DecisionID: r.DecisionID}
}

func eventToRecord(e ledger.RunEvent) eventRecord {
	return eventRecord{At: e.At.UTC(), To: string(e.To), Action: string(e.Action), DecisionID: e.DecisionID,
		By: e.By, Reason: e.Reason, Stage: e.Stage, CheckpointStep: e.CheckpointStep, ReportDue: utcOrZero(e.ReportDue),
		GPUs: e.GPUs}
}

func (e eventRecord) event(runID string) ledger.RunEvent {
	return ledger.RunEvent{RunID: runID, At: e.At.UTC(), To: api.RunState(e.To), Action: api.Action(e.Action),
		DecisionID: e.DecisionID, By: e.By, Reason: e.Reason, Stage: e.Stage, CheckpointStep: e.CheckpointStep,
		ReportDue: utcOrZero(e.ReportDue), GPUs: e.GPUs}
}

func (r revocationRecord) revocation() ledger.Revocation {
	return ledger.Revocation{Kind: r.Kind, Subject: r.Subject, Reason: r.Reason, RevokedBy: r.RevokedBy,
		RevokedAt: r.RevokedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(), DecisionID: r.DecisionID}
}

func confirmationToRecord(c ledger.Confirmation) confirmationRecord {
	return confirmationRecord{
		Ref:         c.Ref,
		JTI:         c.JTI,
		Account:     c.Account,
		Action:      string(c.Action),
		Token:       c.Token,
		ExpiresAt:   c.ExpiresAt.UTC(),
		DepositedAt: c.DepositedAt.UTC(),
		State:       c.State,
		ConsumedBy:  c.ConsumedBy,
		ConsumedAt:  utcOrZero(c.ConsumedAt),

		BookingID:      c.BookingID,
		ManifestDigest: c.ManifestDigest,
		RunID:          c.RunID,
		CostMicroUSD:   c.CostMicroUSD,
	}
}

func (r confirmationRecord) confirmation() ledger.Confirmation {
	return ledger.Confirmation{
		Ref:         r.Ref,
		JTI:         r.JTI,
		Account:     r.Account,
		Action:      api.Action(r.Action),
		Token:       r.Token,
		ExpiresAt:   r.ExpiresAt.UTC(),
		DepositedAt: r.DepositedAt.UTC(),
		State:       r.State,
		ConsumedBy:  r.ConsumedBy,
		ConsumedAt:  utcOrZero(r.ConsumedAt),

		BookingID:      r.BookingID,
		ManifestDigest: r.ManifestDigest,
		RunID:          r.RunID,
		CostMicroUSD:   r.CostMicroUSD,
	}
}

func admissionToRecord(a ledger.Admission) admissionRecord {
	return admissionRecord{
		Account:         a.Account,
		IdempotencyKey:  a.IdempotencyKey,
		RequestDigest:   a.RequestDigest,
		DecisionID:      a.DecisionID,
		RunID:           a.RunID,
		Action:          string(a.Action),
		BookingID:       a.BookingID,
		ManifestDigest:  a.ManifestDigest,
		ConfirmationRef: a.ConfirmationRef,
		ConfirmationJTI: a.ConfirmationJTI,
		BundleRevision:  a.BundleRevision,
		State:           a.State,
		CreatedAt:       a.CreatedAt.UTC(),
		EntitlementJTI:  a.EntitlementJTI,
		CallerKeyID:     a.CallerKeyID,
		CostMicroUSD:    a.CostMicroUSD,
		GPUs:            a.GPUs,
		BookedGPUs:      a.BookedGPUs,
		LiveUntil:       utcOrZero(a.LiveUntil),
		Ticket:          a.Ticket,
		Stage:           a.Stage,
		FromStage:       a.FromStage,
		CheckpointStep:  a.CheckpointStep,
	}
}

func (r admissionRecord) admission() ledger.Admission {
	return ledger.Admission{
		Account:         r.Account,
		IdempotencyKey:  r.IdempotencyKey,
		RequestDigest:   r.RequestDigest,
		DecisionID:      r.DecisionID,
		RunID:           r.RunID,
		Action:          api.Action(r.Action),
		BookingID:       r.BookingID,
		ManifestDigest:  r.ManifestDigest,
		ConfirmationRef: r.ConfirmationRef,
		ConfirmationJTI: r.ConfirmationJTI,
		BundleRevision:  r.BundleRevision,
		State:           r.State,
		CreatedAt:       r.CreatedAt.UTC(),
		EntitlementJTI:  r.EntitlementJTI,
		CallerKeyID:     r.CallerKeyID,
		CostMicroUSD:    r.CostMicroUSD,
		GPUs:            r.GPUs,
		BookedGPUs:      r.BookedGPUs,
		LiveUntil:       utcOrZero(r.LiveUntil),
		Ticket:          r.Ticket,
		Stage:           r.Stage,
		FromStage:       r.FromStage,
		CheckpointStep:  r.CheckpointStep,
	}
}

// normalizeAdmission returns a as it will read back, so a fresh Commit and a
// replay hand the caller identical values.
func normalizeAdmission(a ledger.Admission) ledger.Admission {
	return admissionToRecord(a).admission()
}

// decodeConfirmation and decodeAdmission return plain errors: a record that
// does not decode is a corrupt store, which the caller reports as
// ledger.ErrUnavailable.
func decodeConfirmation(v []byte) (confirmationRecord, error) {
	var r confirmationRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return confirmationRecord{}, fmt.Errorf("corrupt confirmation record: %w", err)
	}
	return r, nil
}

func decodeAdmission(v []byte) (ledger.Admission, error) {
	var r admissionRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return ledger.Admission{}, fmt.Errorf("corrupt admission record: %w", err)
	}
	return r.admission(), nil
}

func utcOrZero(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}
