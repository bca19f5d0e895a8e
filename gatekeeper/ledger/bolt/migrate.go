package bolt

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	bbolt "go.etcd.io/bbolt"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// migrateRunLife is the migration from schema 2 to 3, run in Open's
// transaction, from the admissions alone (every fact it writes is one an
// admission recorded):
//
//   - each booking is bound to the account of its earliest admission (a
//     booking two accounts used before schema 3 stays with the first);
//   - each run record gets the entitlement jti of its train.create, an
//     entruns entry, and its restarts (count and last step);
//   - each run gets its events from the admissions that acted on it, in
//     decision-time order: the create, advances, restarts, cancels and
//     cleanups (only the end the record names moved it), and the
//     booking.release that ended it.
func migrateRunLife(tx *bbolt.Tx) error {
	first := map[string]ledger.Admission{}      // booking → earliest admission
	byRun := map[string][]ledger.Admission{}    // run → admissions acting on it
	releases := map[string][]ledger.Admission{} // booking → its releases
	err := tx.Bucket(bucketAdmissions).ForEach(func(k, v []byte) error {
		a, err := decodeAdmission(v)
		if err != nil {
			return fmt.Errorf("admission %q: %w", k, err)
		}
		if f, ok := first[a.BookingID]; !ok || a.CreatedAt.Before(f.CreatedAt) {
			first[a.BookingID] = a
		}
		switch a.Action.Effect() {
		case api.EffectReleaseBooking:
			releases[a.BookingID] = append(releases[a.BookingID], a)
		case api.EffectCreateRun, api.EffectStepRun, api.EffectEndRun:
			byRun[a.RunID] = append(byRun[a.RunID], a)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for booking, a := range first {
		b, _, err := getBooking(tx, booking)
		if err != nil {
			return err
		}
		if b.Account == "" {
			b.Account, b.BoundAt = a.Account, a.CreatedAt.UTC()
			if err := putJSON(tx.Bucket(bucketBookings), []byte(booking), b); err != nil {
				return err
			}
		}
	}
	recs := tx.Bucket(bucketRunRecs)
	var ids []string
	if err := recs.ForEach(func(k, _ []byte) error { ids = append(ids, string(k)); return nil }); err != nil {
		return err
	}
	for _, id := range ids {
		r, err := getRun(recs, id)
		if err != nil || r.RunID != id {
			continue // unreadable: Check reports it, its booking fails closed
		}
		admissions := byRun[id]
		slices.SortStableFunc(admissions, func(x, y ledger.Admission) int {
			return cmp.Or(x.CreatedAt.Compare(y.CreatedAt), cmp.Compare(x.DecisionID, y.DecisionID))
		})
		var events []ledger.RunEvent
		ended := false
		for _, a := range admissions {
			switch a.Action.Effect() {
			case api.EffectCreateRun:
				r.EntitlementJTI = a.EntitlementJTI
				events = append(events, ledger.AdmissionEvent(a, id, true))
			case api.EffectStepRun:
				if spec, _ := a.Action.Spec(); spec.CheckpointStep {
					r.Restarts++
					r.LastCheckpointStep = a.CheckpointStep
				}
				events = append(events, ledger.AdmissionEvent(a, id, true))
			case api.EffectEndRun:
				moved := !ended && string(a.Action) == r.EndedBy && a.CreatedAt.Equal(r.EndedAt)
				ended = ended || moved
				events = append(events, ledger.AdmissionEvent(a, id, moved))
			}
		}
		if !ended && r.EndedBy != "" {
			for _, a := range releases[r.BookingID] {
				if string(a.Action) == r.EndedBy && a.CreatedAt.Equal(r.EndedAt) {
					events = append(events, ledger.AdmissionEvent(a, id, true))
					break
				}
			}
		}
		slices.SortStableFunc(events, func(x, y ledger.RunEvent) int { return x.At.Compare(y.At) })
		for _, e := range events {
			if err := appendEvent(tx, e); err != nil {
				return err
			}
		}
		if r.EntitlementJTI != "" {
			if err := tx.Bucket(bucketEntitlementRuns).Put(joinKey(r.EntitlementJTI, id), nil); err != nil {
				return err
			}
		}
		if err := putJSON(recs, []byte(id), r); err != nil {
			return err
		}
	}
	return nil
}

// checkRunEvents is Check's part for the run's state machine: every run
// has its events and they replay to its record (ledger.CheckEvents); every
// admission on a run has its event; the entruns index lists exactly the
// runs with an entitlement jti; every booking with an admission is bound.
func checkRunEvents(tx *bbolt.Tx, bad func(string, ...any)) error {
	recs := tx.Bucket(bucketRunRecs)
	decided := map[[2]string]bool{} // (run, decision id) with an event
	err := recs.ForEach(func(k, v []byte) error {
		var r runRecord
		if err := json.Unmarshal(v, &r); err != nil {
			return nil // reported by checkRunLife
		}
		var events []ledger.RunEvent
		if err := runEvents(tx, r.RunID, func(e ledger.RunEvent) error {
			events = append(events, e)
			decided[[2]string{r.RunID, e.DecisionID}] = true
			return nil
		}); err != nil {
			bad("run %s: %v", k, err)
			return nil
		}
		for _, p := range ledger.CheckEvents(r.run(), events) {
			bad("%s", p)
		}
		if r.EntitlementJTI != "" && tx.Bucket(bucketEntitlementRuns).Get(joinKey(r.EntitlementJTI, r.RunID)) == nil {
			bad("run %s is not indexed under its entitlement", k)
		}
		if tx.Bucket(bucketAccountRuns).Get(joinKey(r.Account, r.RunID)) == nil {
			bad("run %s is not indexed under its account", k)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = tx.Bucket(bucketEntitlementRuns).ForEach(func(k, _ []byte) error {
		jti, runID, ok := cutNUL(k)
		if !ok {
			bad("entitlement index key %q has no run id", k)
			return nil
		}
		r, err := getRun(recs, runID)
		if recs.Get([]byte(runID)) == nil || err != nil || r.EntitlementJTI != jti {
			bad("entitlement index %s names run %s, which is not admitted under it", jti, runID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n, runs := tx.Bucket(bucketAccountRuns).Stats().KeyN, recs.Stats().KeyN; n != runs {
		bad("account index has %d entries for %d run records", n, runs)
	}
	return tx.Bucket(bucketAdmissions).ForEach(func(k, v []byte) error {
		a, err := decodeAdmission(v)
		if err != nil {
			return nil // reported by Check
		}
		if b, _, err := getBooking(tx, a.BookingID); err != nil || b.Account == "" {
			bad("booking %s of admission %q is bound to no account", a.BookingID, k)
		}
		switch a.Action.Effect() {
		case api.EffectCreateRun, api.EffectStepRun, api.EffectEndRun:
			if recs.Get([]byte(a.RunID)) != nil && !decided[[2]string{a.RunID, a.DecisionID}] {
				bad("admission %q on run %s has no event", k, a.RunID)
			}
		}
		return nil
	})
}

func cutNUL(k []byte) (string, string, bool) {
	for i, c := range k {
		if c == 0 {
			return string(k[:i]), string(k[i+1:]), true
		}
	}
	return "", "", false
}
