package bolt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// The live index (bucket liveruns, schema 2): one entry per run, keyed
//
//	booking NUL end NUL run_id
//
// where end is the instant the run stops holding its GPUs — LiveUntil, or
// EndedAt when an admission ended it before — as 12 bytes that sort in time
// order (timeKey). RunRecord.Live(now) is exactly "now < end", so the runs
// live at now are the booking's entries after (booking, now): a seek and a
// walk over the live runs only, however many runs the booking ever had.
// Ended and expired runs sort before now and are never visited, so nothing
// needs pruning for the reads to stay proportional to the live runs; the
// entries are kept (like bookingruns) so that an answer for any now is the
// one the run records give.
//
// The value is the run record in a compact binary form (encodeLive), so
// usage and the capacity check decode no JSON. Every write of a run record
// goes through putRunRec, which moves the entry in the same transaction.

// timeKey encodes t as 8 big-endian bytes of Unix seconds with the sign bit
// flipped and 4 of nanoseconds: byte order is time order for any time.
func timeKey(dst []byte, t time.Time) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(t.Unix())^(1<<63))
	return binary.BigEndian.AppendUint32(dst, uint32(t.Nanosecond()))
}

const timeKeyLen = 12

// runEnd is when r stops holding its GPUs: Live(now) == now.Before(runEnd(r)).
func runEnd(r runRecord) time.Time {
	if !r.EndedAt.IsZero() && r.EndedAt.Before(r.LiveUntil) {
		return r.EndedAt
	}
	return r.LiveUntil
}

func liveKey(booking string, end time.Time, runID string) []byte {
	k := make([]byte, 0, len(booking)+2+timeKeyLen+len(runID))
	k = append(k, booking...)
	k = append(k, 0)
	k = timeKey(k, end)
	k = append(k, 0)
	return append(k, runID...)
}

// encodeLive is the live index's value: uvarint GPUs and booked GPUs; the
// times admitted, live until and ended (zero: a single 0 byte) as varint
// seconds + uvarint nanoseconds after a 1 byte; then account, manifest
// digest, ended by and stage, each uvarint length + bytes. The run id and
// booking are in the key.
func encodeLive(r runRecord) []byte {
	v := make([]byte, 0, 48+len(r.Account)+len(r.ManifestDigest)+len(r.EndedBy)+len(r.Stage))
	v = binary.AppendUvarint(v, uint64(r.GPUs))
	v = binary.AppendUvarint(v, uint64(r.BookedGPUs))
	for _, t := range []time.Time{r.AdmittedAt, r.LiveUntil, r.EndedAt} {
		if t.IsZero() {
			v = append(v, 0)
			continue
		}
		v = append(v, 1)
		v = binary.AppendVarint(v, t.Unix())
		v = binary.AppendUvarint(v, uint64(t.Nanosecond()))
	}
	for _, s := range []string{r.Account, r.ManifestDigest, r.EndedBy, r.Stage} {
		v = binary.AppendUvarint(v, uint64(len(s)))
		v = append(v, s...)
	}
	// the checkpoint storage the run keeps, appended last and only when
	// there is some: entries written before it have none
	if r.Plan != nil && r.Plan.CheckpointGiB > 0 {
		v = binary.AppendUvarint(v, uint64(r.Plan.CheckpointGiB))
	}
	return v
}

var errCorruptLive = errors.New("corrupt live index entry")

// liveDecoder decodes live index values; it shares the strings that repeat
// across a booking's runs (account, manifest, stage) within one walk.
type liveDecoder struct {
	strs map[string]string
}

func (d *liveDecoder) str(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := d.strs[string(b)]; ok {
		return s
	}
	if d.strs == nil {
		d.strs = map[string]string{}
	}
	s := string(b)
	if len(d.strs) < 256 {
		d.strs[s] = s
	}
	return s
}

// decode returns the run record of the entry (k, v) of booking.
func (d *liveDecoder) decode(booking string, k, v []byte) (ledger.RunRecord, error) {
	var r ledger.RunRecord
	if len(k) < len(booking)+2+timeKeyLen || k[len(booking)+1+timeKeyLen] != 0 {
		return r, errCorruptLive
	}
	r.RunID, r.BookingID = string(k[len(booking)+2+timeKeyLen:]), booking
	ok := true
	r.GPUs, v, ok = liveInt(v, ok)
	r.BookedGPUs, v, ok = liveInt(v, ok)
	r.AdmittedAt, v, ok = liveTime(v, ok)
	r.LiveUntil, v, ok = liveTime(v, ok)
	r.EndedAt, v, ok = liveTime(v, ok)
	var b []byte
	b, v, ok = liveBytes(v, ok)
	r.Account = d.str(b)
	b, v, ok = liveBytes(v, ok)
	r.ManifestDigest = d.str(b)
	b, v, ok = liveBytes(v, ok)
	r.EndedBy = api.Action(d.str(b))
	b, v, ok = liveBytes(v, ok)
	r.Stage = d.str(b)
	if ok && len(v) > 0 {
		gib, n := binary.Uvarint(v)
		if n <= 0 || gib == 0 || gib > math.MaxInt64 {
			return ledger.RunRecord{}, errCorruptLive
		}
		r.Plan.CheckpointGiB, v = int64(gib), v[n:]
	}
	if !ok || len(v) != 0 {
		return ledger.RunRecord{}, errCorruptLive
	}
	return r, nil
}

// liveGPUs returns the GPUs of a live index value without decoding the rest.
func liveGPUs(v []byte) (int, error) {
	n, _, ok := liveInt(v, true)
	if !ok {
		return 0, errCorruptLive
	}
	return n, nil
}

func liveInt(v []byte, ok bool) (int, []byte, bool) {
	if !ok {
		return 0, nil, false
	}
	x, n := binary.Uvarint(v)
	if n <= 0 || x > ledger.MaxGPUs {
		return 0, nil, false
	}
	return int(x), v[n:], true
}

func liveTime(v []byte, ok bool) (time.Time, []byte, bool) {
	if !ok || len(v) == 0 {
		return time.Time{}, nil, false
	}
	if v[0] == 0 {
		return time.Time{}, v[1:], true
	}
	sec, n := binary.Varint(v[1:])
	if n <= 0 {
		return time.Time{}, nil, false
	}
	ns, v, ok := liveInt(v[1+n:], true)
	if !ok || ns >= 1e9 {
		return time.Time{}, nil, false
	}
	return time.Unix(sec, int64(ns)).UTC(), v, true
}

func liveBytes(v []byte, ok bool) ([]byte, []byte, bool) {
	n, v, ok := liveInt(v, ok)
	if !ok || n > len(v) {
		return nil, nil, false
	}
	return v[:n], v[n:], true
}

// putRunRec writes r as the run record of r.RunID and moves its live index
// entry from where prev (the record before, nil for a new run) put it.
func putRunRec(tx *bbolt.Tx, prev *runRecord, r runRecord) error {
	if err := putJSON(tx.Bucket(bucketRunRecs), []byte(r.RunID), r); err != nil {
		return err
	}
	live := tx.Bucket(bucketLiveRuns)
	if prev != nil {
		if err := live.Delete(liveKey(prev.BookingID, runEnd(*prev), prev.RunID)); err != nil {
			return err
		}
	}
	return live.Put(liveKey(r.BookingID, runEnd(r), r.RunID), encodeLive(r))
}

// liveRuns calls fn with each run of booking live at now (RunRecord.Live),
// in the order they stop holding GPUs; it visits no other run.
func liveRuns(tx *bbolt.Tx, booking string, now time.Time, fn func(ledger.RunRecord) error) error {
	prefix := joinKey(booking, "")
	from := timeKey(bytes.Clone(prefix), now)
	var d liveDecoder
	cur := tx.Bucket(bucketLiveRuns).Cursor()
	for k, v := cur.Seek(from); k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Next() {
		if len(k) >= len(from) && bytes.Equal(k[:len(from)], from) {
			continue // ends exactly at now: no longer live
		}
		r, err := d.decode(booking, k, v)
		if err != nil {
			return fmt.Errorf("live index of booking %s: %w", booking, err)
		}
		if !r.Live(now) {
			// The key said otherwise: the entry and its value disagree.
			return fmt.Errorf("live index of booking %s: run %s: %w", booking, r.RunID, errCorruptLive)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// liveHeld returns the GPUs the runs of booking live at now hold (the
// HeldGPUs of ledger.Usage), decoding nothing but each value's GPUs.
func liveHeld(tx *bbolt.Tx, booking string, now time.Time) (int, error) {
	prefix := joinKey(booking, "")
	from := timeKey(bytes.Clone(prefix), now)
	held := 0
	cur := tx.Bucket(bucketLiveRuns).Cursor()
	for k, v := cur.Seek(from); k != nil && bytes.HasPrefix(k, prefix); k, v = cur.Next() {
		if len(k) >= len(from) && bytes.Equal(k[:len(from)], from) {
			continue // ends exactly at now: no longer live
		}
		g, err := liveGPUs(v)
		if err != nil {
			return 0, fmt.Errorf("live index of booking %s: %w", booking, err)
		}
		held += g
	}
	return held, nil
}

// checkCapacity is ledger.CheckCapacity over the runs of a.BookingID live
// at a.CreatedAt: when the run fits and no checkpoint quota is known, from
// their GPUs alone; otherwise from their records (the checkpoint storage
// they keep, and the error that names them).
func checkCapacity(tx *bbolt.Tx, a ledger.Admission) error {
	released, err := bookingReleased(tx, a.BookingID)
	if err != nil {
		return err
	}
	if !released.IsZero() {
		return abort(ledger.CheckCapacity(nil, released, a))
	}
	held, err := liveHeld(tx, a.BookingID, a.CreatedAt)
	if err != nil {
		return err
	}
	fits := held+a.GPUs <= a.BookedGPUs
	if fits && a.Plan.StorageQuotaGiB <= 0 {
		return nil
	}
	// the checkpoint storage the live runs keep is in their records
	runs, _, err := liveUsage(tx, a.BookingID, a.CreatedAt)
	if err != nil {
		return err
	}
	if err := ledger.CheckCapacity(runs, released, a); err != nil {
		return abort(err)
	}
	if fits {
		return nil
	}
	return fmt.Errorf("live index of booking %s: %d GPUs held by its entries' values, less by its records", a.BookingID, held)
}

// bookingReleased returns when booking was released (zero if not).
func bookingReleased(tx *bbolt.Tx, booking string) (time.Time, error) {
	v := tx.Bucket(bucketBookings).Get([]byte(booking))
	if v == nil {
		return time.Time{}, nil
	}
	var b bookingRecord
	if err := json.Unmarshal(v, &b); err != nil {
		return time.Time{}, fmt.Errorf("corrupt booking record: %w", err)
	}
	return utcOrZero(b.ReleasedAt), nil
}

// liveUsage returns the runs of booking live at now and when it was
// released: the input of ledger.Usage and ledger.CheckCapacity, which give
// the same answer as over every run of the booking (they only count the
// live ones).
func liveUsage(tx *bbolt.Tx, booking string, now time.Time) ([]ledger.RunRecord, time.Time, error) {
	released, err := bookingReleased(tx, booking)
	if err != nil {
		return nil, released, err
	}
	var runs []ledger.RunRecord
	err = liveRuns(tx, booking, now, func(r ledger.RunRecord) error {
		runs = append(runs, r)
		return nil
	})
	return runs, released, err
}

// backfillLive builds the live index from the schema-1 booking index (the
// runs each booking's usage counted): the migration from schema 1, run in
// Open's transaction. The entries are put in key order: bbolt fills a new
// bucket in one pass that way, where run-id order made the migration
// quadratic (minutes at 100 000 runs). A run whose record is missing,
// unreadable or names another run gets a poison entry that sorts after any
// time and does not decode, so its booking's usage and capacity checks
// fail closed (ErrUnavailable) and Check reports it, as schema 1 did,
// instead of the file failing to open.
func backfillLive(tx *bbolt.Tx) error {
	type entry struct{ k, v []byte }
	var entries []entry
	recs := tx.Bucket(bucketRunRecs)
	err := tx.Bucket(bucketBookingRuns).ForEach(func(k, _ []byte) error {
		booking, runID, ok := bytes.Cut(k, []byte{0})
		if !ok {
			return fmt.Errorf("booking index key %q has no run id", k)
		}
		var r runRecord
		if v := recs.Get(runID); v == nil || json.Unmarshal(v, &r) != nil ||
			r.RunID != string(runID) || r.BookingID != string(booking) {
			entries = append(entries, entry{poisonKey(string(booking), string(runID)), poisonValue})
			return nil
		}
		entries = append(entries, entry{liveKey(r.BookingID, runEnd(r), r.RunID), encodeLive(r)})
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(a, b entry) int { return bytes.Compare(a.k, b.k) })
	live := tx.Bucket(bucketLiveRuns)
	live.FillPercent = 1 // appended in key order
	for _, e := range entries {
		if err := live.Put(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// poisonKey is a live index key of booking whose end bytes are all 0xff:
// after any time timeKey encodes, so every read of the booking visits it.
// poisonValue never decodes (a uvarint cut short).
func poisonKey(booking, runID string) []byte {
	k := make([]byte, 0, len(booking)+2+timeKeyLen+len(runID))
	k = append(k, booking...)
	k = append(k, 0)
	k = append(k, bytes.Repeat([]byte{0xff}, timeKeyLen)...)
	k = append(k, 0)
	return append(k, runID...)
}

var poisonValue = []byte{0xff}

// checkLive is Check's part for the live index: exactly one entry per run
// record, under the run's end, holding the record.
func checkLive(tx *bbolt.Tx, bad func(string, ...any)) error {
	recs := tx.Bucket(bucketRunRecs)
	entries := 0
	var d liveDecoder
	err := tx.Bucket(bucketLiveRuns).ForEach(func(k, v []byte) error {
		entries++
		booking, _, ok := bytes.Cut(k, []byte{0})
		if !ok {
			bad("live index entry %q has no booking", k)
			return nil
		}
		got, err := d.decode(string(booking), k, v)
		if err != nil {
			bad("live index entry %q: %v", k, err)
			return nil
		}
		rv := recs.Get([]byte(got.RunID))
		if rv == nil {
			bad("live index entry of booking %s names missing run %s", booking, got.RunID)
			return nil
		}
		var r runRecord
		if err := json.Unmarshal(rv, &r); err != nil {
			return nil // reported by checkRunLife
		}
		if !bytes.Equal(k, liveKey(r.BookingID, runEnd(r), r.RunID)) || !sameRun(got, r.run()) {
			bad("live index entry of run %s disagrees with its run record", got.RunID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n := recs.Stats().KeyN; entries != n {
		bad("live index has %d entries for %d run records", entries, n)
	}
	return nil
}

// sameRun reports whether the live index entry a holds the record b: the
// facts of the GPUs it holds (RunRecord.Held), times by Equal.
func sameRun(a, b ledger.RunRecord) bool {
	return a.Held().Equal(b.Held())
}
