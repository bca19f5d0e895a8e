package bolt

import (
	"encoding/json"
	"fmt"
	"time"

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
}

type admissionRecord struct {
	Account         string                `json:"account"`
	IdempotencyKey  string                `json:"idempotency_key"`
	RequestDigest   string                `json:"request_digest"`
	DecisionID      string                `json:"decision_id,omitempty"`
	RunID           string                `json:"run_id,omitempty"`
	Action          string                `json:"action"`
	BookingID       string                `json:"booking_id,omitempty"`
	ManifestDigest  string                `json:"manifest_digest,omitempty"`
	ConfirmationRef string                `json:"confirmation_ref"`
	ConfirmationJTI string                `json:"confirmation_jti"`
	BundleRevision  string                `json:"bundle_revision,omitempty"`
	State           ledger.AdmissionState `json:"state"`
	CreatedAt       time.Time             `json:"created_at"`
}

func confirmationToRecord(c ledger.Confirmation) confirmationRecord {
	return confirmationRecord{
		Ref:         c.Ref,
		JTI:         c.JTI,
		Account:     c.Account,
		Action:      c.Action,
		Token:       c.Token,
		ExpiresAt:   c.ExpiresAt.UTC(),
		DepositedAt: c.DepositedAt.UTC(),
		State:       c.State,
		ConsumedBy:  c.ConsumedBy,
		ConsumedAt:  utcOrZero(c.ConsumedAt),
	}
}

func (r confirmationRecord) confirmation() ledger.Confirmation {
	return ledger.Confirmation{
		Ref:         r.Ref,
		JTI:         r.JTI,
		Account:     r.Account,
		Action:      r.Action,
		Token:       r.Token,
		ExpiresAt:   r.ExpiresAt.UTC(),
		DepositedAt: r.DepositedAt.UTC(),
		State:       r.State,
		ConsumedBy:  r.ConsumedBy,
		ConsumedAt:  utcOrZero(r.ConsumedAt),
	}
}

func admissionToRecord(a ledger.Admission) admissionRecord {
	return admissionRecord{
		Account:         a.Account,
		IdempotencyKey:  a.IdempotencyKey,
		RequestDigest:   a.RequestDigest,
		DecisionID:      a.DecisionID,
		RunID:           a.RunID,
		Action:          a.Action,
		BookingID:       a.BookingID,
		ManifestDigest:  a.ManifestDigest,
		ConfirmationRef: a.ConfirmationRef,
		ConfirmationJTI: a.ConfirmationJTI,
		BundleRevision:  a.BundleRevision,
		State:           a.State,
		CreatedAt:       a.CreatedAt.UTC(),
	}
}

func (r admissionRecord) admission() ledger.Admission {
	return ledger.Admission{
		Account:         r.Account,
		IdempotencyKey:  r.IdempotencyKey,
		RequestDigest:   r.RequestDigest,
		DecisionID:      r.DecisionID,
		RunID:           r.RunID,
		Action:          r.Action,
		BookingID:       r.BookingID,
		ManifestDigest:  r.ManifestDigest,
		ConfirmationRef: r.ConfirmationRef,
		ConfirmationJTI: r.ConfirmationJTI,
		BundleRevision:  r.BundleRevision,
		State:           r.State,
		CreatedAt:       r.CreatedAt.UTC(),
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
