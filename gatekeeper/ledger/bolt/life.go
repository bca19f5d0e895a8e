package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// The run's life and revocations (see ledger.RunRecord, ledger.Revocation).

func joinKey(a, b string) []byte {
	k := make([]byte, 0, len(a)+1+len(b))
	k = append(k, a...)
	k = append(k, 0)
	return append(k, b...)
}

func getRun(recs *bbolt.Bucket, runID string) (runRecord, error) {
	v := recs.Get([]byte(runID))
	if v == nil {
		return runRecord{}, fmt.Errorf("booking index points at missing run %s", runID)
	}
	var r runRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return runRecord{}, fmt.Errorf("corrupt run record: %w", err)
	}
	return r, nil
}

func putJSON(b *bbolt.Bucket, k []byte, v any) error {
	val, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(k, val)
}

// checkRevocations aborts with a *ledger.RevocationError when anything a
// rests on is revoked.
func checkRevocations(tx *bbolt.Tx, a ledger.Admission) error {
	b := tx.Bucket(bucketRevocations)
	for _, ks := range ledger.RevocationSubjects(a) {
		if v := b.Get(joinKey(ks[0], ks[1])); v != nil {
			var r revocationRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("corrupt revocation record: %w", err)
			}
			return abort(&ledger.RevocationError{Revocation: r.revocation()})
		}
	}
	return nil
}

// getBooking returns booking's record (ok false when it has none).
func getBooking(tx *bbolt.Tx, booking string) (bookingRecord, bool, error) {
	v := tx.Bucket(bucketBookings).Get([]byte(booking))
	if v == nil {
		return bookingRecord{}, false, nil
	}
	var b bookingRecord
	if err := json.Unmarshal(v, &b); err != nil {
		return bookingRecord{}, false, fmt.Errorf("corrupt booking record: %w", err)
	}
	return b, true, nil
}

// checkBookingAccount aborts with ledger.ErrBookingAccount when a's booking
// is bound to another account.
func checkBookingAccount(tx *bbolt.Tx, a ledger.Admission) error {
	b, _, err := getBooking(tx, a.BookingID)
	if err != nil {
		return err
	}
	if err := ledger.CheckBookingAccount(b.Account, a); err != nil {
		return abort(err)
	}
	return nil
}

// bindBooking binds a's booking to a's account when nothing bound it yet
// and, for a release, marks it released: the booking record as a's commit
// leaves it.
func bindBooking(tx *bbolt.Tx, a ledger.Admission) error {
	b, _, err := getBooking(tx, a.BookingID)
	if err != nil {
		return err
	}
	changed := false
	if b.Account == "" {
		b.Account, b.BoundAt, changed = a.Account, a.CreatedAt.UTC(), true
	}
	if a.Action.Effect() == api.EffectReleaseBooking && b.ReleasedAt.IsZero() {
		b.ReleasedAt, b.ReleasedBy, changed = a.CreatedAt.UTC(), a.IdempotencyKey, true
	}
	if !changed {
		return nil
	}
	return putJSON(tx.Bucket(bucketBookings), []byte(a.BookingID), b)
}

// eventKey is the runevents key of a run's seq-th event.
func eventKey(runID string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(joinKey(runID, ""), seq)
}

// appendEvent writes e as its run's next event.
func appendEvent(tx *bbolt.Tx, e ledger.RunEvent) error {
	prefix := joinKey(e.RunID, "")
	c := tx.Bucket(bucketRunEvents).Cursor()
	k, _ := c.Seek(eventKey(e.RunID, 1<<64-1))
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	seq := uint64(1)
	if k != nil && bytes.HasPrefix(k, prefix) && len(k) == len(prefix)+8 {
		seq = binary.BigEndian.Uint64(k[len(prefix):]) + 1
	}
	return putJSON(tx.Bucket(bucketRunEvents), eventKey(e.RunID, seq), eventToRecord(e))
}

// runEvents calls fn with each event of runID in the order written.
func runEvents(tx *bbolt.Tx, runID string, fn func(ledger.RunEvent) error) error {
	prefix := joinKey(runID, "")
	c := tx.Bucket(bucketRunEvents).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if len(k) != len(prefix)+8 {
			continue // another run's id extends this one's: never, ids hold no NUL
		}
		var e eventRecord
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("corrupt run event %q: %w", k, err)
		}
		if err := fn(e.event(runID)); err != nil {
			return err
		}
	}
	return nil
}

// writeRunLife applies a's effect on the run's life, after checking
// capacity for train.create: a new run record, a run stepped, a run ended
// by cancel or cleanup, or a booking released with its live runs ended;
// each run it acts on gets its event.
func writeRunLife(tx *bbolt.Tx, a ledger.Admission) error {
	recs := tx.Bucket(bucketRunRecs)
	end := func(r runRecord) error {
		// Ended already (even by an end decided later than this one that
		// committed first), or past its declared end: keep how it ended.
		// The same rule as PostgreSQL's ended_at IS NULL AND live_until > t.
		if !r.EndedAt.IsZero() || !a.CreatedAt.Before(r.LiveUntil) {
			return appendEvent(tx, ledger.AdmissionEvent(a, r.RunID, false))
		}
		prev := r
		r.EndedAt, r.EndedBy = a.CreatedAt.UTC(), string(a.Action)
		if err := putRunRec(tx, &prev, r); err != nil {
			return err
		}
		return appendEvent(tx, ledger.AdmissionEvent(a, r.RunID, true))
	}
	switch a.Action.Effect() {
	case api.EffectCreateRun:
		// Only the runs live at a.CreatedAt count (ledger.CheckCapacity):
		// the live index hands over exactly those, whatever the history.
		if err := checkCapacity(tx, a); err != nil {
			return err
		}
		r := runRecord{RunID: a.RunID, Account: a.Account, BookingID: a.BookingID, ManifestDigest: a.ManifestDigest,
			GPUs: a.GPUs, BookedGPUs: a.BookedGPUs, AdmittedAt: a.CreatedAt.UTC(), LiveUntil: a.LiveUntil.UTC(),
			Stage: a.Stage, EntitlementJTI: a.EntitlementJTI, Plan: planToRecord(a.Plan), ReportDue: utcOrZero(a.ReportDue)}
		if err := putRunRec(tx, nil, r); err != nil {
			return err
		}
		if err := tx.Bucket(bucketBookingRuns).Put(joinKey(a.BookingID, a.RunID), nil); err != nil {
			return err
		}
		if a.EntitlementJTI != "" {
			if err := tx.Bucket(bucketEntitlementRuns).Put(joinKey(a.EntitlementJTI, a.RunID), nil); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketAccountRuns).Put(joinKey(a.Account, a.RunID), nil); err != nil {
			return err
		}
		return appendEvent(tx, ledger.AdmissionEvent(a, a.RunID, true))
	case api.EffectEndRun:
		if recs.Get([]byte(a.RunID)) == nil {
			return nil // the server checked the run exists; nothing is held
		}
		r, err := getRun(recs, a.RunID)
		if err != nil {
			return err
		}
		if r.BookingID != a.BookingID || r.Account != a.Account {
			return abort(fmt.Errorf("ledger: commit: run of another booking or account: %w", ledger.ErrConfirmationMismatch))
		}
		return end(r)
	case api.EffectStepRun:
		if recs.Get([]byte(a.RunID)) == nil {
			return abort(fmt.Errorf("ledger: commit: run: %w", ledger.ErrNotFound))
		}
		r, err := getRun(recs, a.RunID)
		if err != nil {
			return err
		}
		before := r.run()
		if err := ledger.CheckRunStep(before, a); err != nil {
			return abort(err)
		}
		if ledger.Grows(before, a) {
			// the runs the booking's live index holds at a.CreatedAt, the
			// run among them at what it holds now
			runs, _, err := liveUsage(tx, a.BookingID, a.CreatedAt)
			if err != nil {
				return err
			}
			if err := ledger.CheckGrow(runs, before, a); err != nil {
				return abort(err)
			}
		}
		prev := r
		next := ledger.Stepped(before, a)
		r.Stage, r.Restarts, r.LastCheckpointStep = next.Stage, next.Restarts, next.LastCheckpointStep
		r.ReportDue, r.Report = utcOrZero(next.ReportDue), reportToRecord(next.Report)
		r.GPUs = next.GPUs
		if err := putRunRec(tx, &prev, r); err != nil {
			return err
		}
		return appendEvent(tx, ledger.StepEvent(a, before))
	case api.EffectReleaseBooking:
		// end changes only the runs live at a.CreatedAt: those the live
		// index lists (collected first: writes invalidate the cursor).
		var ids []string
		err := liveRuns(tx, a.BookingID, a.CreatedAt, func(r ledger.RunRecord) error {
			ids = append(ids, r.RunID)
			return nil
		})
		if err != nil {
			return err
		}
		for _, id := range ids {
			r, err := getRun(recs, id)
			if err != nil {
				return err
			}
			if !r.EndedAt.IsZero() {
				continue // an end decided later committed first: it stays
			}
			prev := r
			r.EndedAt, r.EndedBy = a.CreatedAt.UTC(), string(a.Action)
			if err := putRunRec(tx, &prev, r); err != nil {
				return err
			}
			if err := appendEvent(tx, ledger.AdmissionEvent(a, r.RunID, true)); err != nil {
				return err
			}
		}
	}
	return nil
}

// revokeRuns revokes, for the revocation r stored as stored, every run of
// its booking or admitted under its entitlement that is live at
// r.RevokedAt and not revoked yet.
func revokeRuns(tx *bbolt.Tx, r, stored ledger.Revocation) error {
	var ids []string
	switch r.Kind {
	case ledger.RevokeBooking:
		err := liveRuns(tx, r.Subject, r.RevokedAt, func(run ledger.RunRecord) error {
			ids = append(ids, run.RunID)
			return nil
		})
		if err != nil {
			return err
		}
	case ledger.RevokeEntitlement:
		prefix := joinKey(r.Subject, "")
		c := tx.Bucket(bucketEntitlementRuns).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			ids = append(ids, string(k[len(prefix):]))
		}
	default:
		return nil
	}
	applied := stored
	applied.RevokedAt = r.RevokedAt
	recs := tx.Bucket(bucketRunRecs)
	for _, id := range ids {
		run, err := getRun(recs, id)
		if err != nil {
			return err
		}
		if run.Revocation != nil || !run.run().Live(r.RevokedAt) {
			continue
		}
		prev := run
		run.Revocation = runRevocationToRecord(applied)
		if err := putRunRec(tx, &prev, run); err != nil {
			return err
		}
		if err := appendEvent(tx, ledger.RevocationEvent(id, applied)); err != nil {
			return err
		}
	}
	return nil
}

// HaltRun implements ledger.Store.
func (s *Store) HaltRun(ctx context.Context, h ledger.Halt) (ledger.RunRecord, bool, error) {
	if err := h.Validate(); err != nil {
		return ledger.RunRecord{}, false, err
	}
	var (
		out    ledger.RunRecord
		halted bool
	)
	err := s.write(ctx, "halt", s.db.Update, func(tx *bbolt.Tx) error {
		recs := tx.Bucket(bucketRunRecs)
		if recs.Get([]byte(h.RunID)) == nil {
			return abort(fmt.Errorf("ledger: halt: run: %w", ledger.ErrNotFound))
		}
		r, err := getRun(recs, h.RunID)
		if err != nil {
			return err
		}
		out, halted = r.run(), false
		ok, err := ledger.CheckHalt(out, h)
		if err != nil {
			return abort(err)
		}
		if !ok {
			return nil
		}
		prev := r
		r.Halt = haltToRecord(h.RunHalt)
		if err := putRunRec(tx, &prev, r); err != nil {
			return err
		}
		out, halted = r.run(), true
		return appendEvent(tx, ledger.HaltEvent(h))
	})
	if err != nil {
		return ledger.RunRecord{}, false, err
	}
	return out, halted, nil
}

// RecordReport implements ledger.Store.
func (s *Store) RecordReport(ctx context.Context, p ledger.Report) (ledger.RunRecord, bool, error) {
	if err := p.Validate(); err != nil {
		return ledger.RunRecord{}, false, err
	}
	var (
		out      ledger.RunRecord
		recorded bool
	)
	err := s.write(ctx, "report", s.db.Update, func(tx *bbolt.Tx) error {
		recs := tx.Bucket(bucketRunRecs)
		if recs.Get([]byte(p.RunID)) == nil {
			return abort(fmt.Errorf("ledger: report: run: %w", ledger.ErrNotFound))
		}
		r, err := getRun(recs, p.RunID)
		if err != nil {
			return err
		}
		out, recorded = r.run(), false
		ok, err := ledger.CheckRecordReport(out, p)
		if err != nil {
			return abort(err)
		}
		if !ok {
			return nil
		}
		prev := r
		r.Report = reportToRecord(p.RunReport)
		if err := putRunRec(tx, &prev, r); err != nil {
			return err
		}
		out, recorded = r.run(), true
		return appendEvent(tx, ledger.ReportEvent(p))
	})
	if err != nil {
		return ledger.RunRecord{}, false, err
	}
	return out, recorded, nil
}

// RunEvents implements ledger.Store.
func (s *Store) RunEvents(ctx context.Context, runID string) ([]ledger.RunEvent, error) {
	var out []ledger.RunEvent
	err := s.read(ctx, "run events", func(tx *bbolt.Tx) error {
		out = nil
		return runEvents(tx, runID, func(e ledger.RunEvent) error {
			if len(out) < ledger.MaxRunEvents {
				out = append(out, e)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RunRecord implements ledger.Store.
func (s *Store) RunRecord(ctx context.Context, runID string) (ledger.RunRecord, error) {
	var r ledger.RunRecord
	err := s.read(ctx, "run record", func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketRunRecs).Get([]byte(runID)) == nil {
			return abort(fmt.Errorf("ledger: run record: %w", ledger.ErrNotFound))
		}
		rec, err := getRun(tx.Bucket(bucketRunRecs), runID)
		r = rec.run()
		return err
	})
	if err != nil {
		return ledger.RunRecord{}, err
	}
	return r, nil
}

// BookingUsage implements ledger.Store.
func (s *Store) BookingUsage(ctx context.Context, bookingID string, now time.Time) (ledger.BookingUsage, error) {
	var u ledger.BookingUsage
	err := s.read(ctx, "booking usage", func(tx *bbolt.Tx) error {
		runs, released, err := liveUsage(tx, bookingID, now)
		if err != nil {
			return err
		}
		u = ledger.Usage(bookingID, runs, released, now)
		b, _, err := getBooking(tx, bookingID)
		u.Account = b.Account
		return err
	})
	if err != nil {
		return ledger.BookingUsage{}, err
	}
	return u, nil
}

// Revoke implements ledger.Store.
func (s *Store) Revoke(ctx context.Context, r ledger.Revocation) (ledger.Revocation, bool, error) {
	if err := r.Validate(); err != nil {
		return ledger.Revocation{}, false, err
	}
	rec := revocationRecord{Kind: r.Kind, Subject: r.Subject, Reason: r.Reason, RevokedBy: r.RevokedBy,
		RevokedAt: r.RevokedAt.UTC(), ExpiresAt: r.ExpiresAt.UTC(), DecisionID: r.DecisionID}
	var (
		stored  ledger.Revocation
		created bool
	)
	err := s.write(ctx, "revoke", s.db.Update, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketRevocations)
		k := joinKey(string(r.Kind), r.Subject)
		if v := b.Get(k); v != nil {
			var prev revocationRecord
			if err := json.Unmarshal(v, &prev); err != nil {
				return fmt.Errorf("corrupt revocation record: %w", err)
			}
			stored, created = prev.revocation(), false
			return revokeRuns(tx, r, stored)
		}
		stored, created = rec.revocation(), true
		if err := putJSON(b, k, rec); err != nil {
			return err
		}
		return revokeRuns(tx, r, stored)
	})
	if err != nil {
		return ledger.Revocation{}, false, err
	}
	return stored, created, nil
}

// Revoked implements ledger.Store.
func (s *Store) Revoked(ctx context.Context, kind ledger.RevocationKind, subject string) (ledger.Revocation, error) {
	var r ledger.Revocation
	err := s.read(ctx, "revoked", func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketRevocations).Get(joinKey(string(kind), subject))
		if v == nil {
			return abort(fmt.Errorf("ledger: revoked: %w", ledger.ErrNotFound))
		}
		var rec revocationRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return fmt.Errorf("corrupt revocation record: %w", err)
		}
		r = rec.revocation()
		return nil
	})
	if err != nil {
		return ledger.Revocation{}, err
	}
	return r, nil
}

// sweepRevocations drops revocations that expired before cutoff.
func (s *Store) sweepRevocations(ctx context.Context, cutoff time.Time) error {
	return s.write(ctx, "sweep", s.db.Update, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketRevocations)
		var due [][]byte
		err := b.ForEach(func(k, v []byte) error {
			var r revocationRecord
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("corrupt revocation record: %w", err)
			}
			if r.ExpiresAt.Before(cutoff) {
				due = append(due, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range due {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

// checkRunLife is Check's part for runs: each train.create admission has
// its run record and booking index entry, and on every booking the GPUs of
// the runs live at each run's admission, and at each grow of a run, never
// exceed what it booked (the GPUs each held then, from its events).
func checkRunLife(tx *bbolt.Tx, bad func(string, ...any)) error {
	byBooking := map[string][]ledger.RunRecord{}
	gpuEvents := map[string][]ledger.RunEvent{}
	err := tx.Bucket(bucketRunRecs).ForEach(func(k, v []byte) error {
		var r runRecord
		if err := json.Unmarshal(v, &r); err != nil {
			bad("run record %s: %v", k, err)
			return nil
		}
		if r.RunID != string(k) {
			bad("run record %s names %s", k, r.RunID)
		}
		if tx.Bucket(bucketRuns).Get(k) == nil {
			bad("run record %s has no train.create admission", k)
		}
		if tx.Bucket(bucketBookingRuns).Get(joinKey(r.BookingID, r.RunID)) == nil {
			bad("run %s is not indexed under booking %s", k, r.BookingID)
		}
		byBooking[r.BookingID] = append(byBooking[r.BookingID], r.run())
		// unreadable events are reported by checkRunEvents
		_ = runEvents(tx, r.RunID, func(e ledger.RunEvent) error {
			if ledger.GPUEvent(e) {
				gpuEvents[r.RunID] = append(gpuEvents[r.RunID], e)
			}
			return nil
		})
		return nil
	})
	if err != nil {
		return err
	}
	err = tx.Bucket(bucketRuns).ForEach(func(k, _ []byte) error {
		if tx.Bucket(bucketRunRecs).Get(k) == nil {
			bad("run %s has no run record", k)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for booking, runs := range byBooking {
		for _, p := range ledger.CheckHeld(runs, gpuEvents) {
			bad("booking %s: %s", booking, p)
		}
	}
	if err := checkLive(tx, bad); err != nil {
		return err
	}
	return checkRunEvents(tx, bad)
}

// Runs implements ledger.Store: a walk of the account's runs in the
// accountruns index from the cursor, reading each run's record.
func (s *Store) Runs(ctx context.Context, q ledger.RunQuery) ([]ledger.RunRecord, bool, error) {
	if err := q.Validate(); err != nil {
		return nil, false, err
	}
	var (
		out  []ledger.RunRecord
		more bool
	)
	err := s.read(ctx, "runs", func(tx *bbolt.Tx) error {
		out, more = nil, false
		prefix := joinKey(q.Account, "")
		recs := tx.Bucket(bucketRunRecs)
		c := tx.Bucket(bucketAccountRuns).Cursor()
		k, _ := c.Seek(joinKey(q.Account, q.After))
		for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			id := string(k[len(prefix):])
			if id <= q.After {
				continue // the cursor itself
			}
			r, err := getRun(recs, id)
			if err != nil {
				return err
			}
			if q.BookingID != "" && r.BookingID != q.BookingID {
				continue
			}
			if len(out) == q.Limit {
				more = true
				return nil
			}
			out = append(out, r.run())
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return out, more, nil
}

// backfillAccountRuns builds the accountruns index from the run records:
// the migration from schema 3, run in Open's transaction. An unreadable
// record is skipped (Check reports it).
func backfillAccountRuns(tx *bbolt.Tx) error {
	idx := tx.Bucket(bucketAccountRuns)
	return tx.Bucket(bucketRunRecs).ForEach(func(k, v []byte) error {
		var r runRecord
		if json.Unmarshal(v, &r) != nil || r.RunID != string(k) {
			return nil
		}
		return idx.Put(joinKey(r.Account, r.RunID), nil)
	})
}

// backfillCreateGPUs writes on each run's train.create event the GPUs it
// admitted, from its record: the migration from schema 6, run in Open's
// transaction. No run of schema 6 grew, so its record's GPUs are its
// create's. A run whose record or first event is unreadable is skipped
// (Check reports it).
func backfillCreateGPUs(tx *bbolt.Tx) error {
	type put struct{ k, v []byte }
	var puts []put
	c := tx.Bucket(bucketRunEvents).Cursor()
	err := tx.Bucket(bucketRunRecs).ForEach(func(k, v []byte) error {
		var r runRecord
		if json.Unmarshal(v, &r) != nil || r.RunID != string(k) {
			return nil
		}
		ek, ev := c.Seek(eventKey(r.RunID, 0))
		if ek == nil || !bytes.Equal(ek, eventKey(r.RunID, 1)) {
			return nil
		}
		var e eventRecord
		if json.Unmarshal(ev, &e) != nil || api.Action(e.Action).Effect() != api.EffectCreateRun || e.GPUs != 0 {
			return nil
		}
		e.GPUs = r.GPUs
		val, err := json.Marshal(e)
		if err != nil {
			return err
		}
		puts = append(puts, put{bytes.Clone(ek), val})
		return nil
	})
	if err != nil {
		return err
	}
	events := tx.Bucket(bucketRunEvents)
	for _, p := range puts {
		if err := events.Put(p.k, p.v); err != nil {
			return err
		}
	}
	return nil
}
