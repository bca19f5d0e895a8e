package main

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
)

// admitOne deposits a confirmation and commits its admission (a run of 8
// GPUs on bk_check) under key in s.
func admitOne(t *testing.T, s ledger.Store, key string) ledger.Confirmation {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	c := ledger.Confirmation{
		Ref: ledger.NewConfirmationRef(), JTI: "jti-" + key, Account: "acct_check", Action: "train.create",
		Token: []byte("h.p.s"), ExpiresAt: now.Add(10 * time.Minute), DepositedAt: now, BookingID: "bk_check",
	}
	if err := s.DepositConfirmation(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(key))
	_, _, err := s.Commit(t.Context(), ledger.Admission{
		Account: c.Account, IdempotencyKey: key, RequestDigest: "sha256:" + hex.EncodeToString(sum[:]),
		DecisionID: "dec_" + key, RunID: ledger.NewRunID(), Action: c.Action, BookingID: c.BookingID,
		ConfirmationRef: c.Ref, ConfirmationJTI: c.JTI, State: api.StateAdmitted, CreatedAt: now,
		GPUs: 8, BookedGPUs: 64, LiveUntil: now.Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// boltLedger writes a bbolt ledger with two admissions and one available
// confirmation, closed; broken removes one admission behind the store's
// back, leaving its confirmation consumed by nothing.
func boltLedger(t *testing.T, broken bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	admitOne(t, s, "k1")
	admitOne(t, s, "k2")
	now := time.Now().UTC()
	if err := s.DepositConfirmation(t.Context(), ledger.Confirmation{Ref: ledger.NewConfirmationRef(), JTI: "jti-spare",
		Account: "acct_check", Action: "train.create", Token: []byte("h.p.s"), ExpiresAt: now.Add(time.Hour),
		DepositedAt: now, BookingID: "bk_check"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if broken {
		db, err := bbolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bbolt.Tx) error {
			return tx.Bucket([]byte("admissions")).Delete([]byte("acct_check\x00k2"))
		})
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return path
}
