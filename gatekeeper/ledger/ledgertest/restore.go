package ledgertest

import (
	"testing"
	"time"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// The account and booking of Deposit's confirmations.
const (
	RestoreAccount = "acct_r"
	RestoreBooking = "bk_r"
)

// Deposit deposits a train.create confirmation jti of RestoreAccount on
// RestoreBooking, deposited at now and expiring ttl later, for the backup
// and restore tests of each store; it fails t if the store refuses it.
func Deposit(t *testing.T, s ledger.Store, jti string, now time.Time, ttl time.Duration) ledger.Confirmation {
	t.Helper()
	c := ledger.Confirmation{
		Ref: ledger.NewConfirmationRef(), JTI: jti, Account: RestoreAccount, Action: "train.create", Token: []byte("h.p.s"),
		ExpiresAt: now.Add(ttl), DepositedAt: now, BookingID: RestoreBooking,
	}
	if err := s.DepositConfirmation(t.Context(), c); err != nil {
		t.Fatalf("deposit %s: %v", jti, err)
	}
	return c
}

// AdmissionOf is the admission that consumes c under idempotency key key at
// at: one GPU of a 64-GPU booking, live for an hour.
func AdmissionOf(c ledger.Confirmation, key string, at time.Time) ledger.Admission {
	return ledger.Admission{
		Account: c.Account, IdempotencyKey: key, RequestDigest: digest(key),
		DecisionID: "dec_" + key, RunID: ledger.NewRunID(), Action: c.Action, BookingID: c.BookingID,
		ConfirmationRef: c.Ref, ConfirmationJTI: c.JTI, State: api.StateAdmitted, CreatedAt: at,
		GPUs: 1, BookedGPUs: 64, LiveUntil: at.Add(time.Hour),
	}
}
