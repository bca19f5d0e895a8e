package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/ledgertest"
	"github.com/itocompute/itogate/internal/patience"
)

func openTemp(t testing.TB) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "ledger.db"), Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledger.Store { return openTemp(t) })
}

// TestConformanceCommitPaths runs the suite with Commit always in db.Update
// and always in db.Batch, so each path groupCommit may take passes alone.
func TestConformanceCommitPaths(t *testing.T) {
	for name, pick := range map[string]func(*bbolt.DB) func(func(*bbolt.Tx) error) error{
		"update": func(db *bbolt.DB) func(func(*bbolt.Tx) error) error { return db.Update },
		"batch":  func(db *bbolt.DB) func(func(*bbolt.Tx) error) error { return db.Batch },
	} {
		t.Run(name, func(t *testing.T) {
			ledgertest.Run(t, func(t *testing.T) ledger.Store {
				s := openTemp(t)
				s.commitTx = pick(s.db)
				return s
			})
		})
	}
}

func TestOpen(t *testing.T) {
	t.Run("reopen keeps records", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		ref := ledger.NewConfirmationRef()
		c := ledger.Confirmation{
			Ref: ref, JTI: "jti-1", Account: "acct_42", Action: "train.create", Token: []byte("tok"),
			ExpiresAt: time.Now().Add(time.Hour), DepositedAt: time.Now(),
		}
		if err := s.DepositConfirmation(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s, err = Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got, err := s.Confirmation(t.Context(), ref); err != nil || got.JTI != "jti-1" {
			t.Fatalf("after reopen: %+v, %v", got, err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("ledger file mode = %v, %v; want 0600", fi.Mode(), err)
		}
	})

	t.Run("locked by another opener", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		s, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		start := time.Now()
		_, err = Open(path, Options{Timeout: 50 * time.Millisecond})
		if !errors.Is(err, ledger.ErrUnavailable) || !errors.Is(err, bbolt.ErrTimeout) {
			t.Fatalf("second Open = %v, want ErrUnavailable wrapping bbolt.ErrTimeout", err)
		}
		// Without the timeout the second Open would wait for the lock,
		// held until the test ends: returning at all shows the bound.
		if d := time.Since(start); d > patience.Wait {
			t.Fatalf("second Open took %v", d)
		}
	})

	t.Run("unknown schema", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		rawUpdate(t, path, func(tx *bbolt.Tx) error {
			b, err := tx.CreateBucket(bucketMeta)
			if err != nil {
				return err
			}
			return b.Put(keySchema, []byte("99"))
		})
		if _, err := Open(path, Options{}); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("Open(schema 99) = %v, want ErrUnavailable", err)
		}
	})

	t.Run("not a bolt file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ledger.db")
		if err := os.WriteFile(path, make([]byte, 8192), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(path, Options{}); !errors.Is(err, ledger.ErrUnavailable) {
			t.Fatalf("Open(garbage) = %v, want ErrUnavailable", err)
		}
	})

	t.Run("negative timeout", func(t *testing.T) {
		if _, err := Open(filepath.Join(t.TempDir(), "x.db"), Options{Timeout: -1}); err == nil {
			t.Fatal("Open(Timeout -1) succeeded")
		}
	})
}

// TestCorruptRecord: a record that does not decode is a store fault, never
// "not found" or "available".
func TestCorruptRecord(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ref := ledger.NewConfirmationRef()
	err := s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketConfirmations).Put([]byte(ref), []byte("{not json"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Confirmation(t.Context(), ref); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Confirmation(corrupt) = %v, want ErrUnavailable", err)
	}
	a := ledger.Admission{
		Account: "acct_42", IdempotencyKey: "k", Action: "train.create",
		RequestDigest: "sha256:" + fmt.Sprintf("%064x", 1),
		RunID:         ledger.NewRunID(), BookingID: "bk_01",
		ConfirmationRef: ref, ConfirmationJTI: "j", State: api.StateAdmitted, CreatedAt: time.Now(),
		GPUs: 1, BookedGPUs: 1, LiveUntil: time.Now().Add(time.Hour),
	}
	if _, _, err := s.Commit(t.Context(), a); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Commit(corrupt confirmation) = %v, want ErrUnavailable", err)
	}
}

// TestBatchRerunResetsOutputs forces bbolt to run one Commit's function
// twice: first in a batch where an earlier call wrote the same key (so it
// sees a replay), then, after that call and a later one fail and the batch
// is rolled back, alone against a store without that write (a fresh
// commit). The answer must come from the committed run: replayed=false.
func TestBatchRerunResetsOutputs(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "ledger.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.commitTx = s.db.Batch
	// The batch runs when its third call joins, never on a timer: however
	// slow the machine, x, the Commit and y share one batch.
	s.db.MaxBatchSize, s.db.MaxBatchDelay = 3, time.Hour
	ctx := t.Context()
	refs := seed(t, s, 1)
	a := ledger.Admission{
		Account: "acct_42", IdempotencyKey: "key-1", RequestDigest: "sha256:" + fmt.Sprintf("%064x", 7),
		RunID: ledger.NewRunID(), Action: "train.create", BookingID: "bk_01", ConfirmationRef: refs[0], ConfirmationJTI: refs[0],
		State: api.StateAdmitted, CreatedAt: time.Now().UTC(),
		GPUs: 1, BookedGPUs: 1 << 20, LiveUntil: time.Now().Add(time.Hour).UTC(),
	}
	ghost := a
	ghost.RunID = ledger.NewRunID()
	ghostVal, err := json.Marshal(admissionToRecord(ghost))
	if err != nil {
		t.Fatal(err)
	}

	var xRuns atomic.Int32
	xErr, yErr := make(chan error, 1), make(chan error, 1)
	type result struct {
		stored   ledger.Admission
		replayed bool
		err      error
	}
	bRes := make(chan result, 1)
	go func() {
		xErr <- s.db.Batch(func(tx *bbolt.Tx) error {
			if xRuns.Add(1) > 1 {
				return errors.New("x gives up on its second run")
			}
			return tx.Bucket(bucketAdmissions).Put(admissionKey(a.Account, a.IdempotencyKey), ghostVal)
		})
	}()
	time.Sleep(50 * time.Millisecond) // orders the calls in the batch; the batch itself waits for all three
	go func() {
		stored, replayed, err := s.Commit(ctx, a)
		bRes <- result{stored, replayed, err}
	}()
	time.Sleep(50 * time.Millisecond)
	go func() {
		yErr <- s.db.Batch(func(*bbolt.Tx) error { return errors.New("y always fails") })
	}()

	if err := <-xErr; err == nil {
		t.Fatal("x succeeded")
	}
	if err := <-yErr; err == nil {
		t.Fatal("y succeeded")
	}
	r := <-bRes
	if xRuns.Load() < 2 {
		t.Skipf("bbolt did not batch the calls as arranged (x ran %d times)", xRuns.Load())
	}
	if r.err != nil || r.replayed || r.stored.RunID != a.RunID {
		t.Fatalf("Commit = %+v, replayed %v, %v; want the fresh commit of run %s", r.stored, r.replayed, r.err, a.RunID)
	}
	if got, err := s.Admission(ctx, a.Account, a.IdempotencyKey); err != nil || got.RunID != a.RunID {
		t.Fatalf("Admission = %+v, %v", got, err)
	}
}

// seed writes n available confirmations for account in one transaction and
// returns their refs; going through DepositConfirmation would cost one fsync
// each before the benchmark even starts.
func seed(tb testing.TB, s *Store, n int) []string {
	tb.Helper()
	refs := make([]string, n)
	exp := time.Now().Add(time.Hour).UTC()
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for i := range refs {
			refs[i] = ledger.NewConfirmationRef()
			rec := confirmationRecord{
				Ref: refs[i], JTI: refs[i], Account: "acct_42", Action: "train.create",
				Token: []byte("header.payload.signature"), ExpiresAt: exp, DepositedAt: exp,
				State: ledger.ConfirmationAvailable, BookingID: "bk_01",
			}
			v, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketConfirmations).Put([]byte(refs[i]), v); err != nil {
				return err
			}
			if err := tx.Bucket(bucketJTIs).Put([]byte(refs[i]), []byte(refs[i])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return refs
}

// benchModes are the commit paths BenchmarkCommit compares: "update" is one
// db.Update (one fsync) per Commit; "batch" is always db.Batch with
// DefaultMaxBatchDelay; "batch10ms" is db.Batch with bbolt's own default
// delay; "shipped" is groupCommit, what Open configures.
var benchModes = []struct {
	name  string
	opts  Options
	apply func(s *Store)
}{
	{"update", Options{}, func(s *Store) { s.commitTx = s.db.Update }},
	{"batch", Options{}, func(s *Store) { s.commitTx = s.db.Batch }},
	{"batch10ms", Options{MaxBatchDelay: 10 * time.Millisecond}, func(s *Store) { s.commitTx = s.db.Batch }},
	{"shipped", Options{}, func(*Store) {}},
}

// BenchmarkCommit measures fsynced Commits of distinct admissions, each
// consuming its own confirmation, from GOMAXPROCS×p parallel callers (p
// requests in flight per CPU). Run with -cpu 2 for the reported figures.
func BenchmarkCommit(b *testing.B) {
	for _, p := range []int{1, 16, 64} {
		for _, m := range benchModes {
			b.Run(fmt.Sprintf("p=%d/%s", p, m.name), func(b *testing.B) {
				s, commit := benchStore(b, m.opts, m.apply)
				b.SetParallelism(p)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := commit(); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
				_ = s.Close()
			})
		}
	}
}

// BenchmarkCommitSerial is one caller at a time: the idle latency a lone
// admission pays on each path.
func BenchmarkCommitSerial(b *testing.B) {
	for _, m := range benchModes {
		b.Run(m.name, func(b *testing.B) {
			s, commit := benchStore(b, m.opts, m.apply)
			b.ResetTimer()
			for range b.N {
				if err := commit(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			_ = s.Close()
		})
	}
}

// benchStore opens a store seeded with b.N confirmations and returns a
// function that commits the next one; it is safe for parallel callers.
func benchStore(b *testing.B, opts Options, apply func(*Store)) (*Store, func() error) {
	s, err := Open(filepath.Join(b.TempDir(), "ledger.db"), opts)
	if err != nil {
		b.Fatal(err)
	}
	apply(s)
	refs := seed(b, s, b.N)
	digest := "sha256:" + fmt.Sprintf("%064x", 42)
	created := time.Now()
	var next atomic.Int64
	ctx := context.Background()
	return s, func() error {
		i := next.Add(1) - 1
		a := ledger.Admission{
			Account: "acct_42", IdempotencyKey: refs[i], RequestDigest: digest,
			RunID: ledger.NewRunID(), Action: "train.create", BookingID: "bk_01", ConfirmationRef: refs[i],
			ConfirmationJTI: refs[i], State: api.StateAdmitted, CreatedAt: created,
			GPUs: 1, BookedGPUs: 1 << 30, LiveUntil: created.Add(time.Hour),
		}
		_, replayed, err := s.Commit(ctx, a)
		if err == nil && replayed {
			err = errors.New("Commit replayed a fresh admission")
		}
		return err
	}
}

// TestCheckFindsHalfWrites: Check reports a consumed confirmation without
// its admission, and an admission whose confirmation is still available.
func TestCheckFindsHalfWrites(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	refs := seed(t, s, 2)
	// seed skips the expiry index; fill it so only the planted faults show.
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for _, ref := range refs {
			v, _ := decodeConfirmation(tx.Bucket(bucketConfirmations).Get([]byte(ref)))
			if err := tx.Bucket(bucketExpiries).Put(expiryKey(v.ExpiresAt, ref), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Check(ctx); err != nil || rep.Available != 2 {
		t.Fatalf("Check on a sound ledger = %+v, %v", rep, err)
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketConfirmations)
		rec, _ := decodeConfirmation(b.Get([]byte(refs[0])))
		rec.State, rec.ConsumedBy, rec.ConsumedAt = ledger.ConfirmationConsumed, "ghost-key", time.Now()
		v, _ := json.Marshal(rec)
		if err := b.Put([]byte(refs[0]), v); err != nil {
			return err
		}
		a := ledger.Admission{
			Account: "acct_42", IdempotencyKey: "half", RequestDigest: "sha256:" + fmt.Sprintf("%064x", 1),
			RunID: ledger.NewRunID(), Action: "train.create", ConfirmationRef: refs[1], ConfirmationJTI: refs[1],
			State: api.StateAdmitted, CreatedAt: time.Now(),
		}
		v, _ = json.Marshal(admissionToRecord(a))
		return tx.Bucket(bucketAdmissions).Put(admissionKey(a.Account, a.IdempotencyKey), v)
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Check(ctx)
	if !errors.Is(err, ledger.ErrInconsistent) {
		t.Fatalf("Check = %v, want ErrInconsistent", err)
	}
	for _, want := range []string{"consumed by ghost-key without an admission", "(acct_42, half): confirmation " + refs[1]} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check error lacks %q: %v", want, err)
		}
	}
}

// TestSecondOpenNamesTheHolder: a second Open of a locked file fails with
// ErrUnavailable and says which file and, on Linux, which process holds it
// (the pid of this test process: bbolt's flock is per open file description,
// so a second Open in one process waits like another process would).
func TestSecondOpenNamesTheHolder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = Open(path, Options{Timeout: time.Millisecond})
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("second Open: %v, want ErrUnavailable", err)
	}
	want := "another process holds " + path
	if runtime.GOOS == "linux" {
		want = fmt.Sprintf("another process (pid %d) holds %s", os.Getpid(), path)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("second Open: %v\nwant it to say %q", err, want)
	}
}

// TestCheckFindsOverbookedBooking: Check reports a booking whose live runs
// held more GPUs than it booked (a state Commit never writes).
func TestCheckFindsOverbookedBooking(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for i, id := range []string{ledger.NewRunID(), ledger.NewRunID()} {
			r := runRecord{RunID: id, Account: "acct_42", BookingID: "bk_over", GPUs: 8, BookedGPUs: 8,
				AdmittedAt: at.Add(time.Duration(i) * time.Minute), LiveUntil: at.Add(time.Hour)}
			if err := putJSON(tx.Bucket(bucketRunRecs), []byte(id), r); err != nil {
				return err
			}
			if err := tx.Bucket(bucketBookingRuns).Put(joinKey("bk_over", id), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Check(t.Context())
	if !errors.Is(err, ledger.ErrInconsistent) || !strings.Contains(err.Error(), "booking bk_over: at run") ||
		!strings.Contains(err.Error(), "16 GPUs were held, 8 booked") {
		t.Fatalf("Check = %v, want the overbooked booking reported", err)
	}
}

// downgrade turns the closed file at path back into schema 1: no live
// index, the version a binary before it wrote.
func downgrade(t *testing.T, path string) { downgradeTo(t, path, 1) }

// downgradeTo rewrites the closed ledger file at path as schema `to` (1 to
// 4) held it: without the job bindings (schema 5); for 3 also without the
// account index (schema 4); for 2 also without
// the run's state, events, entitlement index and booking accounts (schema
// 3); for 1 also without the live index.
func downgradeTo(t *testing.T, path string, to int) {
	t.Helper()
	strip := func(b *bbolt.Bucket, drop func(map[string]any) bool, keys ...string) error {
		type kv struct{ k, v []byte }
		var out []kv
		err := b.ForEach(func(k, v []byte) error {
			var m map[string]any
			if json.Unmarshal(v, &m) != nil {
				return nil // left as it is (a test's corrupt record)
			}
			for _, key := range keys {
				delete(m, key)
			}
			if drop != nil && drop(m) {
				out = append(out, kv{bytes.Clone(k), nil})
				return nil
			}
			nv, err := json.Marshal(m)
			out = append(out, kv{bytes.Clone(k), nv})
			return err
		})
		for _, e := range out {
			if e.v == nil {
				err = errors.Join(err, b.Delete(e.k))
			} else {
				err = errors.Join(err, b.Put(e.k, e.v))
			}
		}
		return err
	}
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		// schema 8 → 7: no charges on workload bindings
		if err := strip(tx.Bucket(bucketWorkloads), nil, "charges"); err != nil {
			return err
		}
		if to == 7 {
			return tx.Bucket(bucketMeta).Put(keySchema, []byte("7"))
		}
		// schema 7 → 6: no GPUs on events
		if err := strip(tx.Bucket(bucketRunEvents), nil, "gpus"); err != nil {
			return err
		}
		if to == 6 {
			return tx.Bucket(bucketMeta).Put(keySchema, []byte("6"))
		}
		// schema 6 → 5: no report deadlines on runs or events
		if err := strip(tx.Bucket(bucketRunRecs), nil, "report_due", "report"); err != nil {
			return err
		}
		if err := strip(tx.Bucket(bucketRunEvents), nil, "report_due"); err != nil {
			return err
		}
		if to == 5 {
			return tx.Bucket(bucketMeta).Put(keySchema, []byte("5"))
		}
		if err := tx.DeleteBucket(bucketJobs); err != nil {
			return err
		}
		if to == 4 {
			return tx.Bucket(bucketMeta).Put(keySchema, []byte("4"))
		}
		if err := tx.DeleteBucket(bucketAccountRuns); err != nil {
			return err
		}
		if to == 3 {
			return tx.Bucket(bucketMeta).Put(keySchema, []byte("3"))
		}
		for _, name := range [][]byte{bucketEntitlementRuns, bucketRunEvents} {
			if err := tx.DeleteBucket(name); err != nil {
				return err
			}
		}
		err := errors.Join(
			strip(tx.Bucket(bucketRunRecs), nil, "entitlement_jti", "restarts", "last_checkpoint_step", "halt", "revocation", "plan"),
			// Schema 2 wrote a booking record only when it was released.
			strip(tx.Bucket(bucketBookings), func(m map[string]any) bool { return m["released_at"] == nil }, "account", "bound_at"),
			strip(tx.Bucket(bucketRevocations), nil, "decision_id"))
		if err != nil {
			return err
		}
		if to == 1 {
			if err := tx.DeleteBucket(bucketLiveRuns); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keySchema, []byte(strconv.Itoa(to)))
	})
}

// rawUpdate runs fn in one transaction on the closed ledger file at path,
// opened with bbolt alone (no migration, no checks).
func rawUpdate(t *testing.T, path string, fn func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(fn)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestMigrateSchema1: a schema 1 file (run records, no live index) opens as
// schema 2 with the index built from its records, answers every usage and
// capacity question of ledgertest.BookingHistory as the store that wrote
// it would, and passes Check.
//
// Open logs "ledger created" for a new file and one line per migration
// step it applied; a current file logs nothing.
func TestMigrateSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{ReplaceAttr: dropTime}))
	s, err := Open(path, Options{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("level=INFO msg=\"ledger created\" store=bbolt path=%s schema=%s\n", path, schemaVersion); logs.String() != want {
		t.Fatalf("log of a new file:\n%s\nwant\n%s", logs.String(), want)
	}
	verify := ledgertest.BookingHistory(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgrade(t, path)
	// Read-only (itogate ledger check) it is refused by its schema, not by a
	// bucket only later schemas have, and left as it is.
	if _, err := Open(path, Options{ReadOnly: true}); !errors.Is(err, ledger.ErrUnavailable) ||
		!strings.Contains(err.Error(), `schema version "1", this binary reads "`+schemaVersion+`" (read-only: not migrated`) {
		t.Fatalf("Open(schema 1, read-only) = %v; want the schema named", err)
	}
	logs.Reset()
	s, err = Open(path, Options{Log: log})
	if err != nil {
		t.Fatalf("Open(schema 1): %v", err)
	}
	defer s.Close()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	steps := []string{"from=1 to=2 name=\"live runs index\"", "from=2 to=3 name=\"run life (events, bookings bound, entitlement index)\"",
		"from=3 to=4 name=\"runs by account index\"", "from=4 to=5 name=\"scheduler jobs bucket\"",
		"from=5 to=6 name=\"eval report deadlines on runs\"", "from=6 to=7 name=\"GPUs on run events (stages that grow their run)\"",
		"from=7 to=8 name=\"GPUs charged to child workloads\""}
	if len(lines) != len(steps) {
		t.Fatalf("migration log:\n%s\nwant %d lines", logs.String(), len(steps))
	}
	for i, step := range steps {
		if want := "level=INFO msg=\"ledger migration applied\" store=bbolt path=" + path + " " + step + " duration="; !strings.HasPrefix(lines[i], want) {
			t.Errorf("migration log line %d: %s\nwant prefix %s", i, lines[i], want)
		}
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		if v := string(tx.Bucket(bucketMeta).Get(keySchema)); v != schemaVersion {
			return fmt.Errorf("schema after migration %q, want %q", v, schemaVersion)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check after migration: %v", err)
	}
	verify(t, s)
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check after the migrated store committed: %v", err)
	}
}

// TestMigrateSchema2: a schema 2 file (no run state, events, entitlement
// index or booking accounts) opens as schema 3 with each run's events
// written from its admissions exactly as the store wrote them, its
// restarts and entitlement, each booking bound to its account; it passes
// Check, answers ledgertest.BookingHistory as before, and an entitlement
// revocation reaches a migrated run.
func TestMigrateSchema2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	verify := ledgertest.BookingHistory(t, s)
	extra := ledgertest.RunLifeHistory(t, s)
	want := map[string][]ledger.RunEvent{}
	runs := map[string]ledger.RunRecord{}
	err = s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketRunRecs).ForEach(func(k, _ []byte) error {
			id := string(k)
			r, err := getRun(tx.Bucket(bucketRunRecs), id)
			runs[id] = r.run()
			if err != nil {
				return err
			}
			return runEvents(tx, id, func(e ledger.RunEvent) error {
				want[id] = append(want[id], e)
				return nil
			})
		})
	})
	if err != nil || len(want) < 10 {
		t.Fatalf("events before: %d runs, %v", len(want), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgradeTo(t, path, 2)
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("Open(schema 2): %v", err)
	}
	defer s.Close()
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check after migration: %v", err)
	}
	for id, events := range want {
		got, err := s.RunEvents(t.Context(), id)
		if err != nil || !reflect.DeepEqual(got, events) {
			t.Fatalf("RunEvents(%s) after migration = %+v, %v\nwant %+v", id, got, err, events)
		}
		r, err := s.RunRecord(t.Context(), id)
		if err != nil || !r.Equal(runs[id]) {
			t.Fatalf("RunRecord(%s) after migration = %+v, %v\nwant %+v", id, r, err, runs[id])
		}
	}
	verify(t, s)
	extra(t, s)
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check after the migrated store committed: %v", err)
	}
}

// TestMigrateSchema4: a schema 4 file (no job bindings) opens as schema 5,
// passes Check, and binds a run to a scheduler job.
func TestMigrateSchema4(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	verify := ledgertest.RunLifeHistory(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgradeTo(t, path, 4)
	if s, err = Open(path, Options{}); err != nil {
		t.Fatalf("Open(schema 4): %v", err)
	}
	defer s.Close()
	err = s.db.View(func(tx *bbolt.Tx) error {
		if v := string(tx.Bucket(bucketMeta).Get(keySchema)); v != schemaVersion {
			return fmt.Errorf("schema after migration %q, want %q", v, schemaVersion)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check after migration: %v", err)
	}
	verify(t, s)
	runs, _, err := s.Runs(t.Context(), ledger.RunQuery{Account: "acct_42", Limit: ledger.MaxRunPage})
	if err != nil || len(runs) == 0 {
		t.Fatalf("Runs = %d, %v", len(runs), err)
	}
	if _, err := s.JobBinding(t.Context(), runs[0].RunID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("JobBinding after migration = %v, want ErrNotFound", err)
	}
}

// TestMigrateSchema5: a schema 5 file (runs without report deadlines)
// opens as schema 6 with every run and event as it was: Check passes and
// the runs' history reads back, none with a deadline.
func TestMigrateSchema5(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	verify := ledgertest.RunLifeHistory(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgradeTo(t, path, 5)
	var logs bytes.Buffer
	if s, err = Open(path, Options{Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "duration" {
				return slog.Attr{}
			}
			return a
		}}))}); err != nil {
		t.Fatalf("Open(schema 5): %v", err)
	}
	defer s.Close()
	if want := fmt.Sprintf("level=INFO msg=\"ledger migration applied\" store=bbolt path=%[1]s from=5 to=6 name=\"eval report deadlines on runs\"\n"+
		"level=INFO msg=\"ledger migration applied\" store=bbolt path=%[1]s from=6 to=7 name=\"GPUs on run events (stages that grow their run)\"\n"+
		"level=INFO msg=\"ledger migration applied\" store=bbolt path=%[1]s from=7 to=8 name=\"GPUs charged to child workloads\"\n",
		path); logs.String() != want {
		t.Fatalf("migration log %q, want %q", logs.String(), want)
	}
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check after migration: %v", err)
	}
	verify(t, s)
	runs, _, err := s.Runs(t.Context(), ledger.RunQuery{Account: "acct_42", Limit: ledger.MaxRunPage})
	if err != nil || len(runs) == 0 {
		t.Fatalf("Runs = %d, %v", len(runs), err)
	}
	for _, r := range runs {
		if !r.ReportDue.IsZero() || !r.Report.At.IsZero() {
			t.Fatalf("run %s after migration has a report deadline: %+v", r.RunID, r)
		}
	}
}

// TestMigrateSchema6: a schema 6 file (events without GPUs) opens as
// schema 7 with each run's train.create event carrying the GPUs its record
// holds (no run of schema 6 grew): every event reads back as the store
// wrote it, Check passes, and the runs' history answers as before.
func TestMigrateSchema6(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	verify := ledgertest.RunLifeHistory(t, s)
	runs, _, err := s.Runs(t.Context(), ledger.RunQuery{Account: "acct_42", Limit: ledger.MaxRunPage})
	if err != nil || len(runs) == 0 {
		t.Fatalf("Runs = %d, %v", len(runs), err)
	}
	want := map[string][]ledger.RunEvent{}
	for _, r := range runs {
		if want[r.RunID], err = s.RunEvents(t.Context(), r.RunID); err != nil {
			t.Fatal(err)
		}
		if len(want[r.RunID]) == 0 || want[r.RunID][0].GPUs != r.GPUs {
			t.Fatalf("run %s: create event %+v, want its %d GPUs", r.RunID, want[r.RunID], r.GPUs)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgradeTo(t, path, 6)
	if s, err = Open(path, Options{}); err != nil {
		t.Fatalf("Open(schema 6): %v", err)
	}
	defer s.Close()
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check after migration: %v", err)
	}
	for _, r := range runs {
		got, err := s.RunEvents(t.Context(), r.RunID)
		if err != nil || !reflect.DeepEqual(got, want[r.RunID]) {
			t.Fatalf("RunEvents(%s) after migration = %+v, %v\nwant %+v", r.RunID, got, err, want[r.RunID])
		}
	}
	verify(t, s)
}

// TestMigrateSchema7: a schema 7 file (workload bindings without charges)
// opens as schema 8: its binding reads back as before with no charge; an
// older binary is kept off the file; the child bound before the upgrade
// is charged at its next bind, and a second child that would pass the
// run's GPUs with it is refused.
func TestMigrateSchema7(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	t0 := time.Now().UTC().Truncate(time.Second)
	// A run of one GPU.
	a := ledgertest.AdmissionOf(ledgertest.Deposit(t, s, "jti-7", t0, 10*time.Minute), "k7", t0)
	if _, _, err := s.Commit(ctx, a); err != nil {
		t.Fatal(err)
	}
	at := a.CreatedAt.Add(time.Second)
	const js = "jobset.x-k8s.io/JobSet/team-a/train"
	for _, b := range []ledger.WorkloadBind{
		{RunID: a.RunID, Identity: js, UID: "js-1", At: at},
		{RunID: a.RunID, Identity: "batch/Job/team-a/train-a", UID: "job-a", OwnerUID: "js-1", GPUs: 1, At: at},
	} {
		if _, err := s.BindWorkload(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgradeTo(t, path, 7)
	if s, err = Open(path, Options{}); err != nil {
		t.Fatalf("Open(schema 7): %v", err)
	}
	defer s.Close()
	got, err := s.WorkloadBinding(ctx, a.RunID)
	if err != nil || got.Identity != js || !slices.Equal(got.UIDs, []string{"js-1", "job-a"}) || len(got.Charges) != 0 {
		t.Fatalf("binding after migration = %+v, %v; want js-1, job-a and no charge", got, err)
	}
	if _, err := s.Check(ctx); err != nil {
		t.Fatalf("Check after migration: %v", err)
	}
	child := ledger.WorkloadBind{RunID: a.RunID, Identity: "batch/Job/team-a/train-a", UID: "job-a", OwnerUID: "js-1", GPUs: 1, At: at}
	if got, err = s.BindWorkload(ctx, child); err != nil || len(got.Charges) != 1 || got.Charges[0].UID != "job-a" {
		t.Fatalf("the child's next bind = %+v, %v; want it charged", got, err)
	}
	child.Identity, child.UID = "batch/Job/team-a/train-b", "job-b"
	if _, err := s.BindWorkload(ctx, child); !errors.Is(err, ledger.ErrWorkloadGPUsExceed) {
		t.Fatalf("a second child of 1 GPU on a run of 1: %v, want ErrWorkloadGPUsExceed", err)
	}
}

// TestCheckFindsOvercharge: Check reports the children of one owner
// charged more GPUs than their run holds, and a charge whose uid is not of
// its binding (ledger.CheckCharges).
func TestCheckFindsOvercharge(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	t0 := time.Now().UTC().Truncate(time.Second)
	a := ledgertest.AdmissionOf(ledgertest.Deposit(t, s, "jti-over", t0, 10*time.Minute), "k-over", t0) // 1 GPU
	if _, _, err := s.Commit(ctx, a); err != nil {
		t.Fatal(err)
	}
	for _, b := range []ledger.WorkloadBind{
		{RunID: a.RunID, Identity: "jobset.x-k8s.io/JobSet/team-a/train", UID: "js-1", At: t0},
		{RunID: a.RunID, Identity: "batch/Job/team-a/train-a", UID: "job-a", OwnerUID: "js-1", GPUs: 1, At: t0},
	} {
		if _, err := s.BindWorkload(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Check(ctx); err != nil {
		t.Fatalf("Check on a sound ledger = %v", err)
	}
	err := s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketWorkloads)
		var rec workloadRecord
		if err := json.Unmarshal(b.Get([]byte(a.RunID)), &rec); err != nil {
			return err
		}
		rec.Charges[0].GPUs, rec.Charges[0].UID = 5, "ghost"
		v, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		return b.Put([]byte(a.RunID), v)
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Check(ctx)
	for _, want := range []string{"the children of js-1 are charged 5 GPUs, the run holds 1", "of uid ghost under js-1 is not of the binding's uids"} {
		if !errors.Is(err, ledger.ErrInconsistent) || !strings.Contains(err.Error(), want) {
			t.Errorf("Check = %v, want ErrInconsistent saying %q", err, want)
		}
	}
}

// TestMigrateSchema3: a schema 3 file (no account index) opens as schema 4
// with the index built from its run records: Check passes and Runs lists
// each account's runs.
func TestMigrateSchema3(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	verify := ledgertest.RunLifeHistory(t, s)
	before, more, err := s.Runs(t.Context(), ledger.RunQuery{Account: "acct_42", Limit: ledger.MaxRunPage})
	if err != nil || more || len(before) != 3 {
		t.Fatalf("Runs before = %d, %v, %v; want 3", len(before), more, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgradeTo(t, path, 3)
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("Open(schema 3): %v", err)
	}
	defer s.Close()
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check after migration: %v", err)
	}
	after, more, err := s.Runs(t.Context(), ledger.RunQuery{Account: "acct_42", Limit: ledger.MaxRunPage})
	if err != nil || more || len(after) != len(before) {
		t.Fatalf("Runs after = %d, %v, %v; want %d", len(after), more, err, len(before))
	}
	for i := range after {
		if !after[i].Equal(before[i]) {
			t.Fatalf("Runs after[%d] = %+v, want %+v", i, after[i], before[i])
		}
	}
	verify(t, s)
}

// TestCheckFindsLiveIndexFaults: Check reports a run missing from the live
// index and an entry under the wrong end; usage fails closed on a corrupt
// entry.
func TestCheckFindsLiveIndexFaults(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	r := runRecord{RunID: ledger.NewRunID(), Account: "acct_42", BookingID: "bk_idx", GPUs: 8, BookedGPUs: 8,
		AdmittedAt: at, LiveUntil: at.Add(time.Hour)}
	for _, tc := range []struct {
		name  string
		plant func(tx *bbolt.Tx) error
		want  string
	}{
		{"missing", func(tx *bbolt.Tx) error {
			return tx.Bucket(bucketLiveRuns).Delete(liveKey(r.BookingID, r.LiveUntil, r.RunID))
		}, "live index has 0 entries for 1 run records"},
		{"wrong end", func(tx *bbolt.Tx) error {
			if err := tx.Bucket(bucketLiveRuns).Delete(liveKey(r.BookingID, r.LiveUntil, r.RunID)); err != nil {
				return err
			}
			return tx.Bucket(bucketLiveRuns).Put(liveKey(r.BookingID, at.Add(time.Minute), r.RunID), encodeLive(r))
		}, "live index entry of run " + r.RunID + " disagrees with its run record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.db.Update(func(tx *bbolt.Tx) error {
				if err := putRunRec(tx, nil, r); err != nil {
					return err
				}
				if err := tx.Bucket(bucketBookingRuns).Put(joinKey(r.BookingID, r.RunID), nil); err != nil {
					return err
				}
				return tc.plant(tx)
			})
			if err != nil {
				t.Fatal(err)
			}
			_, err = s.Check(t.Context())
			if !errors.Is(err, ledger.ErrInconsistent) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want it to report %q", err, tc.want)
			}
			// Put it right again for the next case.
			err = s.db.Update(func(tx *bbolt.Tx) error {
				c := tx.Bucket(bucketLiveRuns).Cursor()
				for k, _ := c.First(); k != nil; k, _ = c.First() {
					if err := c.Delete(); err != nil {
						return err
					}
				}
				return tx.Bucket(bucketLiveRuns).Put(liveKey(r.BookingID, r.LiveUntil, r.RunID), encodeLive(r))
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	err := s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketLiveRuns).Put(liveKey(r.BookingID, r.LiveUntil, r.RunID), []byte{0x80})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.BookingUsage(t.Context(), r.BookingID, at); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("BookingUsage over a corrupt live entry = %v, want ErrUnavailable", err)
	}
}

// seedBooking writes n runs of 1 GPU on booking "bk_long" in one
// transaction, admitted a second apart before now; all but live of them
// were cancelled a second after admission (the rest are live until an hour
// after now).
func seedBooking(tb testing.TB, s *Store, n, live int, now time.Time) {
	tb.Helper()
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for i := range n {
			r := runRecord{RunID: ledger.NewRunID(), Account: "acct_42", BookingID: "bk_long",
				ManifestDigest: "sha256:" + fmt.Sprintf("%064x", 42), GPUs: 1, BookedGPUs: 1 << 30,
				AdmittedAt: now.Add(-time.Duration(n-i) * time.Second), LiveUntil: now.Add(time.Hour)}
			if i < n-live {
				r.EndedAt, r.EndedBy = r.AdmittedAt.Add(time.Second), "train.cancel"
			}
			if err := putRunRec(tx, nil, r); err != nil {
				return err
			}
			if err := tx.Bucket(bucketBookingRuns).Put(joinKey(r.BookingID, r.RunID), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkBookingUsage is BookingUsage (the read before the policy) and a
// train.create Commit (the capacity check inside the single writer, with
// its fsync) on a booking with runs=N runs ever, of which live=M are live.
// Both cost in proportion to M, not N.
func BenchmarkBookingUsage(b *testing.B) {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	for _, n := range []int{10, 1000, 10000} {
		lives := []int{10, n}
		if n == 10 {
			lives = lives[:1]
		}
		for _, live := range lives {
			name := fmt.Sprintf("runs=%d/live=%d", n, live)
			b.Run(name+"/usage", func(b *testing.B) {
				s := openTemp(b)
				defer s.Close()
				seedBooking(b, s, n, live, now)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					u, err := s.BookingUsage(b.Context(), "bk_long", now)
					if err != nil || u.HeldGPUs != live {
						b.Fatalf("BookingUsage = %d held, %v; want %d", u.HeldGPUs, err, live)
					}
				}
			})
			b.Run(name+"/commit", func(b *testing.B) {
				s := openTemp(b)
				defer s.Close()
				seedBooking(b, s, n, live, now)
				refs := seed(b, s, b.N)
				err := s.db.Update(func(tx *bbolt.Tx) error { // bind them to the booking
					for _, ref := range refs {
						c, err := decodeConfirmation(tx.Bucket(bucketConfirmations).Get([]byte(ref)))
						if err != nil {
							return err
						}
						c.BookingID = "bk_long"
						if err := putJSON(tx.Bucket(bucketConfirmations), []byte(ref), c); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					a := ledger.Admission{
						Account: "acct_42", IdempotencyKey: refs[i], RequestDigest: "sha256:" + fmt.Sprintf("%064x", 42),
						RunID: ledger.NewRunID(), Action: "train.create", BookingID: "bk_long", ConfirmationRef: refs[i],
						ConfirmationJTI: refs[i], State: api.StateAdmitted, CreatedAt: now,
						GPUs: 1, BookedGPUs: 1 << 30, LiveUntil: now.Add(time.Hour),
					}
					if _, _, err := s.Commit(b.Context(), a); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestMigrateSchema1UnreadableRun: a schema 1 file whose booking index
// points at an unreadable run record still opens as schema 2. The other
// bookings answer as before; the broken run's booking fails closed
// (ErrUnavailable), as its usage did in schema 1, and Check reports it.
func TestMigrateSchema1UnreadableRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	good := runRecord{RunID: ledger.NewRunID(), Account: "acct_42", BookingID: "bk_good", GPUs: 8, BookedGPUs: 64,
		AdmittedAt: at, LiveUntil: at.Add(time.Hour)}
	bad := runRecord{RunID: ledger.NewRunID(), Account: "acct_42", BookingID: "bk_bad", GPUs: 8, BookedGPUs: 64,
		AdmittedAt: at, LiveUntil: at.Add(time.Hour)}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		for _, r := range []runRecord{good, bad} {
			if err := putRunRec(tx, nil, r); err != nil {
				return err
			}
			if err := tx.Bucket(bucketBookingRuns).Put(joinKey(r.BookingID, r.RunID), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	downgrade(t, path)
	rawUpdate(t, path, func(tx *bbolt.Tx) error { return tx.Bucket(bucketRunRecs).Put([]byte(bad.RunID), []byte("{not json")) })

	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("Open(schema 1 with an unreadable run record) = %v, want it open", err)
	}
	defer s.Close()
	u, err := s.BookingUsage(t.Context(), good.BookingID, at)
	if err != nil || u.HeldGPUs != 8 || len(u.Runs) != 1 || u.Runs[0].RunID != good.RunID {
		t.Fatalf("BookingUsage(%s) = %+v, %v; want its one run of 8 GPUs", good.BookingID, u, err)
	}
	if _, err := s.BookingUsage(t.Context(), bad.BookingID, at); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("BookingUsage(%s) = %v, want ErrUnavailable", bad.BookingID, err)
	}
	if _, err := s.Check(t.Context()); !errors.Is(err, ledger.ErrInconsistent) || !strings.Contains(err.Error(), "live index entry") {
		t.Fatalf("Check = %v, want it to report the broken run's live index entry", err)
	}
}

// TestCheckFindsRunStateFaults: Check replays each run's events through
// RunRecord.May and reports a restart written after the run's halt, and an
// admission on a run without its event.
func TestCheckFindsRunStateFaults(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := t.Context()
	refs := seed(t, s, 1)
	now := time.Now().UTC()
	a := ledger.Admission{Account: "acct_42", IdempotencyKey: "k1", RequestDigest: "sha256:" + fmt.Sprintf("%064x", 9),
		DecisionID: "dec_1", RunID: ledger.NewRunID(), Action: "train.create", BookingID: "bk_01", ConfirmationRef: refs[0],
		ConfirmationJTI: refs[0], State: api.StateAdmitted, CreatedAt: now, GPUs: 1, BookedGPUs: 8,
		LiveUntil: now.Add(time.Hour), Stage: "pretrain"}
	if _, _, err := s.Commit(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, halted, err := s.HaltRun(ctx, ledger.Halt{RunID: a.RunID, Account: "acct_42", BookingID: "bk_01",
		RunHalt: ledger.RunHalt{At: now, DecisionID: "dec_halt", Stage: "pretrain",
			ReportDigest: "sha256:" + strings.Repeat("e", 64), FailedEvals: []string{"mmlu_5shot"}, By: "evals:k"}}); err != nil || !halted {
		t.Fatalf("HaltRun = %v, %v", halted, err)
	}
	// seed skips the expiry index; fill it so only the planted faults show.
	err := s.db.Update(func(tx *bbolt.Tx) error {
		v, _ := decodeConfirmation(tx.Bucket(bucketConfirmations).Get([]byte(refs[0])))
		return tx.Bucket(bucketExpiries).Put(expiryKey(v.ExpiresAt, refs[0]), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Check(ctx); err != nil {
		t.Fatalf("Check on a sound ledger = %v", err)
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		if err := appendEvent(tx, ledger.RunEvent{RunID: a.RunID, At: now.Add(time.Second), To: api.RunLive,
			Action: api.TrainRestart, DecisionID: "dec_ghost", CheckpointStep: 500}); err != nil {
			return err
		}
		return tx.Bucket(bucketRunEvents).Delete(eventKey(a.RunID, 1))
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Check(ctx)
	for _, want := range []string{"on run " + a.RunID + " has no event", "is not the train.create"} {
		if !errors.Is(err, ledger.ErrInconsistent) || !strings.Contains(err.Error(), want) {
			t.Errorf("Check = %v, want ErrInconsistent saying %q", err, want)
		}
	}
}

// dropTime removes slog's time attribute, so log lines compare exactly.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}
