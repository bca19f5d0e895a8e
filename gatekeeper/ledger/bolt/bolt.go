// Package bolt is the embedded ledger.Store: one bbolt file, every write
// transaction fsynced before it returns (docs/architecture.md §3).
//
// Layout (schema 8), every record JSON-encoded unless said otherwise:
//
//	meta           "schema"              → "2"
//	confirmations  ref                   → confirmation record (token dropped when swept)
//	jtis           jti                   → ref; never deleted, so a jti is never re-deposited
//	expiries       exp (8-byte BE s)+ref → empty; unswept tokens by expiry, for Sweep
//	admissions     account NUL key       → admission record
//	runs           run_id                → account NUL key of the train.create admission
//	runrecs        run_id                → run record (GPUs held, live until, ended)
//	bookingruns    booking NUL run_id    → empty; every run of a booking, for Check
//	liveruns       booking NUL end NUL run_id → the run record, binary (live.go);
//	                                       runs by when they stop holding GPUs, for
//	                                       usage and the capacity check
//	bookings       booking               → booking record (bound account, released)
//	revocations    kind NUL subject      → revocation record, until its expiry
//	workloads      run_id                → workload binding record (identity, uids,
//	                                       child charges)
//	entruns        entitlement jti NUL run_id → empty; the runs admitted under an
//	                                       entitlement, for its revocation
//	runevents      run_id NUL seq (8-byte BE) → run event (a transition: an
//	                                       admission, revocation, halt or passing
//	                                       eval report)
//	accountruns    account NUL run_id    → empty; an account's runs in run id
//	                                       order, for Runs (schema 4)
//
// Schema 2 lacked the run's state (halt, revocation, restarts, entitlement),
// the events, entruns and the booking's account: Open migrates such a file
// to schema 3 in one transaction (migrate.go), binding each booking to the
// account of its first admission and writing each run's events from its
// admissions. As from schema 1, the upgrade is one way. Schema 3 lacked
// accountruns, which Open builds from the run records (migrating to 4).
// Schema 5 added the jobs bucket. Schema 6 adds to run records the eval
// report deadline of the run's stage and the passing report recorded for
// it (report_due, report) and to events the deadline a stage entry set:
// optional fields a schema 5 record lacks (it has no deadline), so the
// migration only bumps the version, which keeps an older binary from
// rewriting runs without them. Schema 7 adds to events the GPUs the run
// holds from them on when they set it (gpus: a train.create's world size,
// a stage advance that grew the run to a larger stage); the migration
// writes each run's create event's from its record (no run of schema 6
// grew), and the version keeps an older binary, whose capacity check and
// fsck know of no grown run, off the file. Schema 8 adds to workload
// records the GPUs their child workloads hold (charges, optional: no child
// was charged before); the migration only bumps the version, which keeps
// an older binary, which would drop the charges when it rewrote a binding,
// off the file.
//
// Schema 1 lacked liveruns: Open migrates such a file to schema 2 in one
// transaction, building the index from bookingruns and the run records (an
// older binary then refuses the file rather than admit runs the index would
// not count: the upgrade is one way, keep a copy of the file to go back).
// runrecs, bookingruns, bookings, revocations and workloads were added to
// schema 1 without a version change: an older file gains them empty on open. Its confirmations carry
// no bindings and so match no admission (they fail closed and expire within
// minutes).
//
// A bbolt file takes an exclusive lock, so one process serves it; several
// replicas need the PostgreSQL store.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// DefaultTimeout is how long Open waits for another process to release the
// file lock when Options.Timeout is zero.
const DefaultTimeout = time.Second

// DefaultMaxBatchDelay is the group-commit window when
// Options.MaxBatchDelay is zero. bbolt's own default, 10 ms, makes batched
// commits wait up to 10 ms whenever fewer than 1000 are in flight:
// BenchmarkCommit (-cpu 2, a disk that fsyncs in ~0.1 ms) measured 184
// commits/s for two callers against ~2,900 with one db.Update each. With
// 1 ms, 32 callers reach ~10,000 commits/s and 128 reach ~17,000, against
// ~2,900 with db.Update, and the idle case never waits (see groupCommit).
const DefaultMaxBatchDelay = time.Millisecond

// schemaVersion is written on first open and checked on every open, so a
// binary never reads a layout it does not know; schema 1 files are migrated
// (see the package doc).
const schemaVersion = "8"

// SchemaVersion is the file layout this binary writes and reads
// (schemaVersion), for the start-up log line and /readyz.
func SchemaVersion() int {
	v, _ := strconv.Atoi(schemaVersion)
	return v
}

// sweepChunk bounds how many tokens one Sweep transaction removes, so a large
// backlog never holds the single writer lock long enough to stall commits.
const sweepChunk = 512

var (
	bucketMeta          = []byte("meta")
	bucketConfirmations = []byte("confirmations")
	bucketJTIs          = []byte("jtis")
	bucketExpiries      = []byte("expiries")
	bucketAdmissions    = []byte("admissions")
	bucketRuns          = []byte("runs")
	bucketRunRecs       = []byte("runrecs")
	bucketBookingRuns   = []byte("bookingruns")
	bucketLiveRuns      = []byte("liveruns")
	bucketBookings      = []byte("bookings")
	bucketRevocations   = []byte("revocations")
	bucketWorkloads     = []byte("workloads")
	// Schema 3.
	bucketEntitlementRuns = []byte("entruns")
	bucketRunEvents       = []byte("runevents")
	// Schema 4.
	bucketAccountRuns = []byte("accountruns")
	// Schema 5: the scheduler job each run's tickets started (ledger.Jobs).
	bucketJobs = []byte("jobs")
	keySchema  = []byte("schema")

	allBuckets = [][]byte{
		bucketMeta, bucketConfirmations, bucketJTIs, bucketExpiries, bucketAdmissions, bucketRuns,
		bucketRunRecs, bucketBookingRuns, bucketLiveRuns, bucketBookings, bucketRevocations, bucketWorkloads,
		bucketEntitlementRuns, bucketRunEvents, bucketAccountRuns, bucketJobs,
	}
)

// Options configures Open.
//
// There is deliberately no NoSync knob: an admission acknowledged before it
// reached the disk could be lost on power failure, and the next request with
// the same confirmation would then be allowed a second time.
type Options struct {
	// Timeout bounds the wait for the file lock. Zero means DefaultTimeout;
	// negative is an error.
	Timeout time.Duration
	// MaxBatchDelay is how long a Commit waits for others to share its
	// transaction and fsync (group commit, see Store.Commit). Zero means
	// DefaultMaxBatchDelay; negative is an error.
	MaxBatchDelay time.Duration
	// ReadOnly opens the file for reading only, under a shared lock (so
	// not while a server holds it): nothing is created or migrated, and a
	// file of another schema version is refused. For `itogate ledger
	// check` on a stopped server's file or a backup.
	ReadOnly bool
	// Now is the clock the restore hold is compared with (HoldUntil);
	// nil: time.Now.
	Now func() time.Time
	// Log receives one line per schema migration Open applied ("ledger
	// migration applied", after its transaction committed) and one when
	// Open creates the file's schema; nil logs nothing.
	Log *slog.Logger
}

// migrationStep names one schema step of the file layout, for the log.
type migrationStep struct {
	from, to int
	name     string
}

// Store is a ledger.Store backed by a bbolt file. It is safe for concurrent
// use.
type Store struct {
	db *bbolt.DB
	// commitTx runs Commit's transaction: groupCommit, unless a test or
	// BenchmarkCommit swaps in db.Update or db.Batch to compare.
	commitTx func(func(*bbolt.Tx) error) error
	// inflight counts Commits between entering and leaving commitTx.
	inflight atomic.Int64
	// holdUntil is the restore hold read at Open (backup.go); now its clock.
	holdUntil time.Time
	now       func() time.Time
}

var (
	_ ledger.Store     = (*Store)(nil)
	_ ledger.Checker   = (*Store)(nil)
	_ ledger.Workloads = (*Store)(nil)
	_ ledger.Jobs      = (*Store)(nil)
)

// Open opens or creates the ledger file at path (mode 0600) and its buckets.
// It fails with an error wrapping ledger.ErrUnavailable if the file cannot be
// opened, stays locked by another process beyond opts.Timeout, or holds an
// unknown schema version. A schema 1 file is migrated to schema 2 (the live
// index built from its run records) before Open returns; if that fails the
// file is left as it was.
func Open(path string, opts Options) (*Store, error) {
	if opts.Timeout < 0 || opts.MaxBatchDelay < 0 {
		return nil, fmt.Errorf("ledger: bolt: negative timeout or batch delay in %+v", opts)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxBatchDelay == 0 {
		opts.MaxBatchDelay = DefaultMaxBatchDelay
	}
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, unavailable("open", err)
		}
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: opts.Timeout, ReadOnly: opts.ReadOnly})
	if errors.Is(err, bbolterrors.ErrTimeout) {
		// bbolt locks the file for one process: say who holds it.
		return nil, unavailable("open", fmt.Errorf("another process%s holds %s (one itogate per bbolt file; stop it, "+
			"use another data directory, or PostgreSQL for several replicas): %w", lockHolder(path), path, err))
	}
	if err != nil {
		return nil, unavailable("open", err)
	}
	if opts.ReadOnly {
		err := db.View(func(tx *bbolt.Tx) error {
			// The schema first: an older file lacks the newer buckets, and
			// its version says why.
			if meta := tx.Bucket(bucketMeta); meta != nil {
				if v := meta.Get(keySchema); v != nil && string(v) != schemaVersion {
					return fmt.Errorf("schema version %q, this binary reads %q (read-only: not migrated; "+
						"itogate serve migrates an older file when it opens it)", v, schemaVersion)
				}
			}
			for _, name := range allBuckets {
				if tx.Bucket(name) == nil {
					return fmt.Errorf("no %s bucket: not an itogate ledger of schema %s", name, schemaVersion)
				}
			}
			return nil
		})
		if err != nil {
			_ = db.Close()
			return nil, unavailable("open", err)
		}
		s := &Store{db: db, now: cmpOr(opts.Now, time.Now)}
		s.commitTx = s.groupCommit
		return s, nil
	}
	var applied []migrationStep
	created := false
	start := time.Now()
	err = db.Update(func(tx *bbolt.Tx) error {
		applied, created = nil, false
		for _, name := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		switch v := meta.Get(keySchema); {
		case v == nil:
			created = true
			return meta.Put(keySchema, []byte(schemaVersion))
		case string(v) == "1":
			if err := backfillLive(tx); err != nil {
				return fmt.Errorf("migrating schema 1 to 2: %w", err)
			}
			applied = append(applied, migrationStep{1, 2, "live runs index"})
			fallthrough
		case string(v) == "2":
			if err := migrateRunLife(tx); err != nil {
				return fmt.Errorf("migrating schema 2 to 3: %w", err)
			}
			applied = append(applied, migrationStep{2, 3, "run life (events, bookings bound, entitlement index)"})
			fallthrough
		case string(v) == "3":
			if err := backfillAccountRuns(tx); err != nil {
				return fmt.Errorf("migrating schema 3 to 4: %w", err)
			}
			applied = append(applied, migrationStep{3, 4, "runs by account index"})
			fallthrough
		case string(v) == "4":
			// Schema 5 adds the jobs bucket, created above; no run was
			// bound to a job before it.
			applied = append(applied, migrationStep{4, 5, "scheduler jobs bucket"})
			fallthrough
		case string(v) == "5":
			// Schema 6 adds the eval report deadline and passing report
			// to run records and the deadline to events, both optional:
			// no record of schema 5 has a deadline. The version guards an
			// older binary, which would drop them when it rewrote a run.
			applied = append(applied, migrationStep{5, 6, "eval report deadlines on runs"})
			fallthrough
		case string(v) == "6":
			if err := backfillCreateGPUs(tx); err != nil {
				return fmt.Errorf("migrating schema 6 to 7: %w", err)
			}
			applied = append(applied, migrationStep{6, 7, "GPUs on run events (stages that grow their run)"})
			fallthrough
		case string(v) == "7":
			// Schema 8 adds child charges to workload records, optional:
			// no child was charged before. The version guards an older
			// binary, which would drop them when it rewrote a binding.
			applied = append(applied, migrationStep{7, 8, "GPUs charged to child workloads"})
			return meta.Put(keySchema, []byte(schemaVersion))
		case string(v) != schemaVersion:
			return fmt.Errorf("schema version %q, this binary reads %q", v, schemaVersion)
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, unavailable("open", err)
	}
	if opts.Log != nil {
		if created {
			opts.Log.Info("ledger created", "store", "bbolt", "path", path, "schema", SchemaVersion())
		}
		// One transaction applied them all: one duration for the lot.
		for _, m := range applied {
			opts.Log.Info("ledger migration applied", "store", "bbolt", "path", path, "from", m.from, "to", m.to,
				"name", m.name, "duration", time.Since(start).Round(time.Millisecond).String())
		}
	}
	db.MaxBatchDelay = opts.MaxBatchDelay
	s := &Store{db: db, now: cmpOr(opts.Now, time.Now)}
	if err := db.View(func(tx *bbolt.Tx) (err error) { s.holdUntil, err = readHold(tx); return err }); err != nil {
		_ = db.Close()
		return nil, unavailable("open", err)
	}
	if !s.holdUntil.IsZero() && opts.Log != nil {
		opts.Log.Warn("ledger restored from a backup: deposits and admissions are held", "path", path,
			"hold_until", s.holdUntil.Format(time.RFC3339))
	}
	s.commitTx = s.groupCommit
	return s, nil
}

// DepositConfirmation implements ledger.Store.
func (s *Store) DepositConfirmation(ctx context.Context, c ledger.Confirmation) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := s.held("deposit"); err != nil {
		return err
	}
	rec := confirmationToRecord(c)
	rec.State = ledger.ConfirmationAvailable
	val, err := json.Marshal(rec)
	if err != nil {
		return unavailable("deposit", err)
	}
	return s.write(ctx, "deposit", s.db.Update, func(tx *bbolt.Tx) error {
		confirmations, jtis := tx.Bucket(bucketConfirmations), tx.Bucket(bucketJTIs)
		if confirmations.Get([]byte(c.Ref)) != nil {
			return abort(fmt.Errorf("ledger: deposit: reference: %w", ledger.ErrConfirmationDuplicate))
		}
		if jtis.Get([]byte(c.JTI)) != nil {
			return abort(fmt.Errorf("ledger: deposit: jti: %w", ledger.ErrConfirmationDuplicate))
		}
		if err := confirmations.Put([]byte(c.Ref), val); err != nil {
			return err
		}
		if err := jtis.Put([]byte(c.JTI), []byte(c.Ref)); err != nil {
			return err
		}
		return tx.Bucket(bucketExpiries).Put(expiryKey(rec.ExpiresAt, c.Ref), nil)
	})
}

// Confirmation implements ledger.Store.
func (s *Store) Confirmation(ctx context.Context, ref string) (ledger.Confirmation, error) {
	var c ledger.Confirmation
	err := s.read(ctx, "confirmation", func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketConfirmations).Get([]byte(ref))
		if v == nil {
			return abort(fmt.Errorf("ledger: confirmation: %w", ledger.ErrNotFound))
		}
		rec, err := decodeConfirmation(v)
		c = rec.confirmation()
		return err
	})
	if err != nil {
		return ledger.Confirmation{}, err
	}
	return c, nil
}

// Admission implements ledger.Store.
func (s *Store) Admission(ctx context.Context, account, key string) (ledger.Admission, error) {
	var a ledger.Admission
	err := s.read(ctx, "admission", func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketAdmissions).Get(admissionKey(account, key))
		if v == nil {
			return abort(fmt.Errorf("ledger: admission: %w", ledger.ErrNotFound))
		}
		var err error
		a, err = decodeAdmission(v)
		return err
	})
	if err != nil {
		return ledger.Admission{}, err
	}
	return a, nil
}

// Run implements ledger.Store.
func (s *Store) Run(ctx context.Context, runID string) (ledger.Admission, error) {
	var a ledger.Admission
	err := s.read(ctx, "run", func(tx *bbolt.Tx) error {
		k := tx.Bucket(bucketRuns).Get([]byte(runID))
		if k == nil {
			return abort(fmt.Errorf("ledger: run: %w", ledger.ErrNotFound))
		}
		v := tx.Bucket(bucketAdmissions).Get(k)
		if v == nil {
			return errors.New("run index points at a missing admission")
		}
		var err error
		a, err = decodeAdmission(v)
		return err
	})
	if err != nil {
		return ledger.Admission{}, err
	}
	return a, nil
}

// Commit implements ledger.Store.
//
// Under load it runs in db.Batch, bbolt's group commit: concurrent Commits
// that arrive within Options.MaxBatchDelay share one transaction and one
// fsync, which is what lets one file keep up (see groupCommit and
// BenchmarkCommit). Batch keeps the exact semantics because:
//   - the calls in a batch run one after another in one read-write
//     transaction, so each sees the writes of those before it: two commits
//     racing for one confirmation still serialize;
//   - when a call returns an error (every domain outcome here aborts without
//     writing), bbolt rolls the whole batch back, re-runs the others without
//     it, and then re-runs the failed call alone in db.Update, whose answer
//     against the then-committed state is the one returned;
//   - so the function may run several times; it resets its outputs on every
//     run and the run in the committed transaction sets them last.
//
// Deposits and sweeps are rare and always use db.Update.
func (s *Store) Commit(ctx context.Context, a ledger.Admission) (ledger.Admission, bool, error) {
	if err := a.Validate(); err != nil {
		return ledger.Admission{}, false, err
	}
	if err := s.held("commit"); err != nil {
		return ledger.Admission{}, false, err
	}
	// commit inputs, not stored with the admission
	plan, budget, due, stageGPUs := a.Plan, a.RestartBudget, a.ReportDue, a.StageGPUs
	a = normalizeAdmission(a)
	a.Plan, a.RestartBudget, a.ReportDue, a.StageGPUs = plan, budget, due, stageGPUs
	akey := admissionKey(a.Account, a.IdempotencyKey)
	aval, err := json.Marshal(admissionToRecord(a))
	if err != nil {
		return ledger.Admission{}, false, unavailable("commit", err)
	}

	var (
		stored   ledger.Admission
		replayed bool
	)
	err = s.write(ctx, "commit", s.commitTx, func(tx *bbolt.Tx) error {
		stored, replayed = ledger.Admission{}, false
		// Checked again inside: a batch may start up to MaxBatchDelay later,
		// and a caller that gave up should not get an admission it never
		// hears about (its retry would only see a replay, but why write it).
		if err := ctx.Err(); err != nil {
			return abort(fmt.Errorf("ledger: commit: %w", err))
		}

		admissions := tx.Bucket(bucketAdmissions)
		if v := admissions.Get(akey); v != nil {
			prev, err := decodeAdmission(v)
			if err != nil {
				return err
			}
			if prev.RequestDigest != a.RequestDigest {
				return abort(fmt.Errorf("ledger: commit: %w", ledger.ErrKeyConflict))
			}
			stored, replayed = prev, true
			return nil
		}

		confirmations := tx.Bucket(bucketConfirmations)
		v := confirmations.Get([]byte(a.ConfirmationRef))
		if v == nil {
			return abort(fmt.Errorf("ledger: commit: confirmation: %w", ledger.ErrNotFound))
		}
		c, err := decodeConfirmation(v)
		if err != nil {
			return err
		}
		if err := ledger.CheckBindings(c.confirmation(), a); err != nil {
			return abort(err)
		}
		if err := checkBookingAccount(tx, a); err != nil {
			return err
		}
		if err := checkRevocations(tx, a); err != nil {
			return err
		}
		switch c.State {
		case ledger.ConfirmationAvailable:
		case ledger.ConfirmationConsumed:
			return abort(fmt.Errorf("ledger: commit: %w", ledger.ErrConfirmationConsumed))
		case ledger.ConfirmationExpired:
			return abort(fmt.Errorf("ledger: commit: %w", ledger.ErrConfirmationExpired))
		default:
			return fmt.Errorf("confirmation record in unknown state %q", c.State)
		}
		if err := writeRunLife(tx, a); err != nil {
			return err
		}
		if err := bindBooking(tx, a); err != nil {
			return err
		}
		c.State = ledger.ConfirmationConsumed
		c.ConsumedBy = a.IdempotencyKey
		c.ConsumedAt = a.CreatedAt
		cval, err := json.Marshal(c)
		if err != nil {
			return err
		}
		if err := confirmations.Put([]byte(a.ConfirmationRef), cval); err != nil {
			return err
		}

		if a.State == api.StateAdmitted {
			runs := tx.Bucket(bucketRuns)
			if runs.Get([]byte(a.RunID)) != nil {
				return abort(fmt.Errorf("ledger: commit: run id already admitted: %w", ledger.ErrInvalid))
			}
			if err := runs.Put([]byte(a.RunID), akey); err != nil {
				return err
			}
		}
		if err := admissions.Put(akey, aval); err != nil {
			return err
		}
		stored = a
		stored.Plan, stored.RestartBudget, stored.ReportDue, stored.StageGPUs = ledger.RunPlan{}, 0, time.Time{}, 0
		return nil
	})
	if err != nil {
		return ledger.Admission{}, false, err
	}
	return stored, replayed, nil
}

// groupCommit runs fn in db.Update when no other Commit is in flight and in
// db.Batch otherwise. db.Batch alone makes every Commit wait MaxBatchDelay
// for company, which an idle gate never gets: a lone admission would pay
// ~1.5 ms instead of ~0.4 ms. Which path a call takes never changes its
// outcome: bbolt runs one write transaction at a time either way.
func (s *Store) groupCommit(fn func(*bbolt.Tx) error) error {
	defer s.inflight.Add(-1)
	if s.inflight.Add(1) == 1 {
		return s.db.Update(fn)
	}
	return s.db.Batch(fn)
}

// Sweep implements ledger.Store. It walks the expiries index, not every
// confirmation, so its cost follows the tokens due, not the tombstones kept
// forever; it commits every sweepChunk tokens and stops early when ctx ends.
func (s *Store) Sweep(ctx context.Context, now time.Time, leeway time.Duration) (int, error) {
	if leeway < 0 {
		return 0, fmt.Errorf("ledger: sweep: negative leeway %v: %w", leeway, ledger.ErrInvalid)
	}
	if err := s.sweepRevocations(ctx, now.Add(-leeway)); err != nil {
		return 0, err
	}
	cutoff := expiryPrefix(now.Add(-leeway))
	total := 0
	for {
		n := 0
		err := s.write(ctx, "sweep", s.db.Update, func(tx *bbolt.Tx) error {
			n = 0
			expiries, confirmations := tx.Bucket(bucketExpiries), tx.Bucket(bucketConfirmations)
			// Collect first: bbolt cursors are invalidated by writes.
			var due [][]byte
			cur := expiries.Cursor()
			for k, _ := cur.First(); k != nil && bytes.Compare(k[:8], cutoff) < 0 && len(due) < sweepChunk; k, _ = cur.Next() {
				due = append(due, bytes.Clone(k))
			}
			for _, k := range due {
				if err := expiries.Delete(k); err != nil {
					return err
				}
				ref := k[8:]
				v := confirmations.Get(ref)
				if v == nil {
					return errors.New("expiry index points at a missing confirmation")
				}
				rec, err := decodeConfirmation(v)
				if err != nil {
					return err
				}
				rec.Token = nil
				if rec.State == ledger.ConfirmationAvailable {
					rec.State = ledger.ConfirmationExpired
				}
				val, err := json.Marshal(rec)
				if err != nil {
					return err
				}
				if err := confirmations.Put(ref, val); err != nil {
					return err
				}
			}
			n = len(due)
			return nil
		})
		total += n
		if err != nil || n < sweepChunk {
			return total, err
		}
	}
}

// Ping implements ledger.Store: a read transaction that finds every bucket.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.held("ping"); err != nil {
		return err
	}
	return s.read(ctx, "ping", func(tx *bbolt.Tx) error {
		for _, name := range allBuckets {
			if tx.Bucket(name) == nil {
				return fmt.Errorf("bucket %q missing", name)
			}
		}
		return nil
	})
}

// Close implements ledger.Store. It waits for running transactions.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return unavailable("close", err)
	}
	return nil
}

// aborted carries an outcome that is already final (a domain error or ctx
// error) out of a transaction function, so write and read can tell it from a
// bbolt fault, which they wrap with ledger.ErrUnavailable.
type aborted struct{ err error }

func (e *aborted) Error() string { return e.err.Error() }

func abort(err error) error { return &aborted{err: err} }

func (s *Store) read(ctx context.Context, op string, fn func(*bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ledger: %s: %w", op, err)
	}
	return outcome(op, s.db.View(fn))
}

func (s *Store) write(ctx context.Context, op string, run func(func(*bbolt.Tx) error) error, fn func(*bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ledger: %s: %w", op, err)
	}
	return outcome(op, run(fn))
}

func outcome(op string, err error) error {
	if err == nil {
		return nil
	}
	if a, ok := errors.AsType[*aborted](err); ok {
		return a.err
	}
	return unavailable(op, err)
}

func unavailable(op string, err error) error {
	return fmt.Errorf("ledger: bolt: %s: %w: %w", op, ledger.ErrUnavailable, err)
}

func admissionKey(account, key string) []byte {
	// Validate forbids NUL in both, so the join is unambiguous.
	k := make([]byte, 0, len(account)+1+len(key))
	k = append(k, account...)
	k = append(k, 0)
	return append(k, key...)
}

// expiryPrefix encodes t as 8 big-endian bytes of Unix seconds with the sign
// bit flipped, so byte order is time order for any time. Dropping the
// fraction only ever sweeps a token up to a second later, never earlier.
func expiryPrefix(t time.Time) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.Unix())^(1<<63))
	return b[:]
}

func expiryKey(t time.Time, ref string) []byte {
	return append(expiryPrefix(t), ref...)
}

// Check implements ledger.Checker: bbolt's own page-level check, then every
// record decoded and cross-checked —
//
//   - each admission's confirmation exists, is consumed by that admission's
//     key and belongs to its account, action and jti;
//   - each consumed confirmation has that admission (nothing half-written);
//   - the run index and the jti index point at existing records and cover
//     every train.create admission and every confirmation;
//   - the expiry index lists exactly the confirmations that keep a token;
//   - every run has its record, booking index entry and one live index
//     entry that agrees with the record, and no booking ever held more GPUs
//     than it booked (ledger.CheckHeld).
func (s *Store) Check(ctx context.Context) (ledger.CheckReport, error) {
	var (
		rep      ledger.CheckReport
		problems []string
	)
	bad := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	err := s.read(ctx, "check", func(tx *bbolt.Tx) error {
		for err := range tx.Check() {
			bad("bbolt: %v", err)
		}
		confirmations := map[string]confirmationRecord{}
		err := tx.Bucket(bucketConfirmations).ForEach(func(k, v []byte) error {
			rec, err := decodeConfirmation(v)
			if err != nil {
				bad("confirmation %s: %v", k, err)
				return nil
			}
			if rec.Ref != string(k) {
				bad("confirmation %s: record names %s", k, rec.Ref)
			}
			confirmations[string(k)] = rec
			rep.Confirmations++
			switch rec.State {
			case ledger.ConfirmationAvailable:
				rep.Available++
			case ledger.ConfirmationConsumed:
				rep.Consumed++
			case ledger.ConfirmationExpired:
				rep.Expired++
			default:
				bad("confirmation %s: unknown state %q", k, rec.State)
			}
			if rec.Token == nil {
				rep.Swept++
				if rec.State == ledger.ConfirmationAvailable {
					bad("confirmation %s: available without a token", k)
				}
			} else if rec.State == ledger.ConfirmationExpired {
				bad("confirmation %s: expired but keeps its token", k)
			}
			if (rec.State == ledger.ConfirmationConsumed) != (rec.ConsumedBy != "") {
				bad("confirmation %s: state %q consumed by %q", k, rec.State, rec.ConsumedBy)
			}
			return nil
		})
		if err != nil {
			return err
		}
		jtis := 0
		err = tx.Bucket(bucketJTIs).ForEach(func(k, v []byte) error {
			jtis++
			if c, ok := confirmations[string(v)]; !ok || c.JTI != string(k) {
				bad("jti index %s points at %s, which does not carry it", k, v)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if jtis != len(confirmations) {
			bad("jti index has %d entries for %d confirmations", jtis, len(confirmations))
		}
		unswept := 0
		err = tx.Bucket(bucketExpiries).ForEach(func(k, _ []byte) error {
			unswept++
			if c, ok := confirmations[string(k[8:])]; !ok || c.Token == nil {
				bad("expiry index lists %s, which has no token", k[8:])
			}
			return nil
		})
		if err != nil {
			return err
		}
		if unswept != rep.Confirmations-rep.Swept {
			bad("expiry index has %d entries for %d unswept confirmations", unswept, rep.Confirmations-rep.Swept)
		}

		consumers := map[string]string{} // ref → admission key
		admissions := tx.Bucket(bucketAdmissions)
		err = admissions.ForEach(func(k, v []byte) error {
			a, err := decodeAdmission(v)
			if err != nil {
				bad("admission %q: %v", k, err)
				return nil
			}
			rep.Admissions++
			if !bytes.Equal(k, admissionKey(a.Account, a.IdempotencyKey)) {
				bad("admission %q: record names (%s, %s)", k, a.Account, a.IdempotencyKey)
			}
			if err := a.Validate(); err != nil {
				bad("admission (%s, %s): %v", a.Account, a.IdempotencyKey, err)
			}
			c, ok := confirmations[a.ConfirmationRef]
			switch {
			case !ok:
				bad("admission (%s, %s): confirmation %s missing", a.Account, a.IdempotencyKey, a.ConfirmationRef)
			case c.State != ledger.ConfirmationConsumed || c.ConsumedBy != a.IdempotencyKey:
				bad("admission (%s, %s): confirmation %s is %q by %q", a.Account, a.IdempotencyKey, a.ConfirmationRef, c.State, c.ConsumedBy)
			case c.Account != a.Account || api.Action(c.Action) != a.Action || c.JTI != a.ConfirmationJTI:
				bad("admission (%s, %s): confirmation %s belongs to another account, action or jti", a.Account, a.IdempotencyKey, a.ConfirmationRef)
			}
			if prev, dup := consumers[a.ConfirmationRef]; dup {
				bad("confirmation %s consumed by both %s and %s", a.ConfirmationRef, prev, a.IdempotencyKey)
			}
			consumers[a.ConfirmationRef] = a.IdempotencyKey
			if a.State == api.StateAdmitted {
				rep.Runs++
				if got := tx.Bucket(bucketRuns).Get([]byte(a.RunID)); !bytes.Equal(got, k) {
					bad("run %s is not indexed to (%s, %s)", a.RunID, a.Account, a.IdempotencyKey)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for ref, c := range confirmations {
			if c.State == ledger.ConfirmationConsumed {
				if _, ok := consumers[ref]; !ok {
					bad("confirmation %s consumed by %s without an admission", ref, c.ConsumedBy)
				}
			}
		}
		runs := 0
		err = tx.Bucket(bucketRuns).ForEach(func(k, v []byte) error {
			runs++
			if admissions.Get(v) == nil {
				bad("run %s points at a missing admission", k)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if runs != rep.Runs {
			bad("run index has %d entries for %d train.create admissions", runs, rep.Runs)
		}
		if err := checkCharges(tx, bad); err != nil {
			return err
		}
		return checkRunLife(tx, bad)
	})
	if err != nil {
		return rep, err
	}
	if len(problems) > 0 {
		return rep, fmt.Errorf("ledger: check: %w: %s", ledger.ErrInconsistent, strings.Join(problems, "; "))
	}
	return rep, nil
}

func cmpOr(f, def func() time.Time) func() time.Time {
	if f != nil {
		return f
	}
	return def
}
