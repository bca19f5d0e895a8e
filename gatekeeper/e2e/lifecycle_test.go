package e2e

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// TestLifecycle drives train.cancel, train.cleanup and booking.release
// through POST /v1/admissions: each needs a confirmation of its own action
// and a key of its own, acts only on a run of the caller's account on the
// named booking, and a cleanup never releases the booking.
func TestLifecycle(t *testing.T) {
	forEachBackend(t, func(t *testing.T, base string, store ledger.Store) {
		a := newActor(t, base, "acct_life", "bk_life_01")
		ctx := context.Background()
		ent := a.entitlement(t, nil)
		created := a.mustAdmit(t, a.create(ent, a.confirmation(t, "train.create", nil), "create-1"), http.StatusOK, "")
		runID := created.Data.RunID

		lifecycle := func(action api.Action, key, ref, run string) api.AdmissionRequest {
			return api.AdmissionRequest{Action: action, BookingID: a.booking, IdempotencyKey: key,
				EntitlementToken: ent, ConfirmationRef: ref, RunID: run}
		}
		forRun := map[string]any{"run_id": runID}

		t.Run("cancel", func(t *testing.T) {
			ref := a.confirmation(t, "train.cancel", forRun)
			req := lifecycle("train.cancel", "cancel-1", ref, runID)
			r := a.mustAdmit(t, req, http.StatusOK, "")
			if r.Data.State != "cancel_admitted" || r.Data.RunID != runID {
				t.Fatalf("cancel: %s", r)
			}
			again := a.mustAdmit(t, req, http.StatusOK, "")
			if again.Data.DecisionID != r.Data.DecisionID || !strings.Contains(again.Notice, "replay") {
				t.Fatalf("cancel retry: %s, want the replay of %s", again, r.Data.DecisionID)
			}
			// Its confirmation is spent: a second cancel needs a new one.
			a.mustAdmit(t, lifecycle("train.cancel", "cancel-2", ref, runID), http.StatusForbidden, "CONFIRMATION_REPLAYED")
		})

		t.Run("cancel under the create's key", func(t *testing.T) {
			ref := a.confirmation(t, "train.cancel", forRun)
			a.mustAdmit(t, lifecycle("train.cancel", "create-1", ref, runID), http.StatusConflict, "IDEMPOTENCY_KEY_CONFLICT")
			wantAvailable(t, store, ref)
		})

		t.Run("cancel with a train.create confirmation", func(t *testing.T) {
			ref := a.confirmation(t, "train.create", nil)
			r, err := a.admit(ctx, lifecycle("train.cancel", "cancel-wrong-act", ref, runID))
			if err != nil || r.Status != http.StatusForbidden || !slices.Contains(r.Codes(), "CONFIRMATION_ACTION_MISMATCH") {
				t.Fatalf("got %v %v; want 403 with CONFIRMATION_ACTION_MISMATCH", r, err)
			}
			wantAvailable(t, store, ref)
		})

		t.Run("cancel of an unknown run", func(t *testing.T) {
			other := ledger.NewRunID()
			ref := a.confirmation(t, "train.cancel", map[string]any{"run_id": other})
			a.mustAdmit(t, lifecycle("train.cancel", "cancel-unknown", ref, other), http.StatusForbidden, "RUN_NOT_FOUND")
			wantAvailable(t, store, ref)
		})

		t.Run("cancel of own run on another booking", func(t *testing.T) {
			// The same account's other booking, with an entitlement and a
			// confirmation for it: still not a way to reach this run.
			a2 := newActor(t, base, a.account, "bk_life_02")
			ref := a2.confirmation(t, "train.cancel", forRun)
			a2.mustAdmit(t, api.AdmissionRequest{Action: "train.cancel", BookingID: a2.booking,
				IdempotencyKey: "cancel-other-booking", EntitlementToken: a2.entitlement(t, nil),
				ConfirmationRef: ref, RunID: runID}, http.StatusForbidden, "RUN_NOT_FOUND")
			wantAvailable(t, store, ref)
		})

		t.Run("cancel of another account's run", func(t *testing.T) {
			b := newActor(t, base, "acct_intruder", "bk_intruder_01")
			ref := b.confirmation(t, "train.cancel", forRun)
			req := api.AdmissionRequest{Action: "train.cancel", BookingID: b.booking, IdempotencyKey: "steal-1",
				EntitlementToken: b.entitlement(t, nil), ConfirmationRef: ref, RunID: runID}
			theirs := b.mustAdmit(t, req, http.StatusForbidden, "RUN_NOT_FOUND")
			// Exactly what an unknown run id gets: nothing about a's run leaks.
			unknown := ledger.NewRunID()
			req.IdempotencyKey, req.RunID = "steal-2", unknown
			req.ConfirmationRef = b.confirmation(t, "train.cancel", map[string]any{"run_id": unknown})
			none := b.mustAdmit(t, req, http.StatusForbidden, "RUN_NOT_FOUND")
			if !bytes.Equal(theirs.Body, none.Body) {
				t.Fatalf("another account's run answers\n%s\nbut an unknown run\n%s", theirs.Body, none.Body)
			}
			wantAvailable(t, store, ref)
		})

		t.Run("cleanup that would release the booking", func(t *testing.T) {
			ref := a.confirmation(t, "train.cleanup", forRun)
			req := lifecycle("train.cleanup", "cleanup-release", ref, runID)
			req.ReleasesBooking = true
			r, err := a.admit(ctx, req)
			if err != nil || r.Status != http.StatusForbidden || !slices.Contains(r.Codes(), "CLEANUP_RELEASE_NOT_CONFIRMED") {
				t.Fatalf("got %v %v; want 403 CLEANUP_RELEASE_NOT_CONFIRMED", r, err)
			}
			// The deny wrote nothing: the same confirmation cleans up
			// without releasing, under a key of its own.
			wantAvailable(t, store, ref)
			cleaned := a.mustAdmit(t, lifecycle("train.cleanup", "cleanup-1", ref, runID), http.StatusOK, "")
			if cleaned.Data.State != "cleanup_admitted" || cleaned.Data.RunID != runID {
				t.Fatalf("cleanup: %s", cleaned)
			}
		})

		t.Run("release", func(t *testing.T) {
			// A release confirmation names no run (no run_id claim).
			ref := a.confirmation(t, "booking.release", nil)
			r := a.mustAdmit(t, lifecycle("booking.release", "release-1", ref, ""), http.StatusOK, "")
			if r.Data.State != "release_admitted" || r.Data.RunID != "" {
				t.Fatalf("release: %s", r)
			}
			// A release names no run.
			other := a.confirmation(t, "booking.release", nil)
			a.mustAdmit(t, lifecycle("booking.release", "release-2", other, runID), http.StatusBadRequest, "REQUEST_INVALID")
			wantAvailable(t, store, other)
		})

		rep := checkLedger(t, store)
		// create-1, cancel-1, cleanup-1, release-1.
		if rep.Admissions != 4 || rep.Consumed != 4 || rep.Runs != 1 {
			t.Fatalf("ledger holds %+v; want 4 admissions, 4 consumptions, 1 run", rep)
		}
	})
}

// TestStatusScopedByAccount: GET /v1/admissions/{key} answers only the
// account that owns the key. Another account gets 404 ADMISSION_NOT_FOUND
// byte for byte as for a key never used, and may use the same key for its
// own admission without touching the first.
func TestStatusScopedByAccount(t *testing.T) {
	forEachBackend(t, func(t *testing.T, base string, store ledger.Store) {
		ctx := context.Background()
		owner := newActor(t, base, "acct_owner", "bk_owner_01")
		other := newActor(t, base, "acct_other", "bk_other_01")
		mine := owner.mustAdmit(t, owner.create(owner.entitlement(t, nil),
			owner.confirmation(t, "train.create", nil), "shared-key"), http.StatusOK, "")

		if r, err := owner.status(ctx, "shared-key"); err != nil || r.Status != http.StatusOK || r.Data.RunID != mine.Data.RunID {
			t.Fatalf("owner's status: %v %v", r, err)
		}
		theirs, err := other.status(ctx, "shared-key")
		if err != nil || theirs.Status != http.StatusNotFound || theirs.code() != api.CodeAdmissionNotFound {
			t.Fatalf("other account's status: %v %v; want 404 ADMISSION_NOT_FOUND", theirs, err)
		}
		never, err := other.status(ctx, "never-used-key")
		if err != nil || !bytes.Equal(theirs.Body, never.Body) {
			t.Fatalf("another account's key answers\n%s\nbut a key never used\n%s", theirs.Body, never.Body)
		}
		if strings.Contains(string(theirs.Body), mine.Data.RunID) || strings.Contains(string(theirs.Body), owner.account) {
			t.Fatalf("404 body leaks the owner's admission: %s", theirs.Body)
		}

		// The key is the other account's to use too.
		second := other.mustAdmit(t, other.create(other.entitlement(t, nil),
			other.confirmation(t, "train.create", nil), "shared-key"), http.StatusOK, "")
		if second.Data.RunID == mine.Data.RunID {
			t.Fatal("two accounts got one run")
		}
		if r, _ := owner.status(ctx, "shared-key"); r.Data.RunID != mine.Data.RunID {
			t.Fatalf("owner's status after the other used the key: %s", r)
		}
	})
}

func wantAvailable(t *testing.T, store ledger.Store, ref string) {
	t.Helper()
	c, err := store.Confirmation(context.Background(), ref)
	if err != nil || c.State != ledger.ConfirmationAvailable {
		t.Fatalf("confirmation %s: %q, %v; want available (a deny writes nothing)", ref, c.State, err)
	}
}
