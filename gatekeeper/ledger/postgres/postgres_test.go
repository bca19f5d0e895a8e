package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/ledgertest"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres/pgtest"
	"github.com/itocompute/itogate/internal/patience"
	"github.com/itocompute/itogate/internal/syncbuf"
)

// TestConformance runs the ledger conformance suite against the real
// PostgreSQL server of ITOGATE_TEST_POSTGRES_DSN, each case in a schema of
// its own.
func TestConformance(t *testing.T) {
	pgtest.DSN(t)
	ledgertest.Run(t, func(t *testing.T) ledger.Store {
		return open(t, testOptions(t))
	})
}

// testOptions are store options for a fresh schema on the test server, with
// a small pool: parallel tests share the server's connections.
func testOptions(t *testing.T) Options {
	t.Helper()
	dsn := pgtest.DSN(t)
	// Bounds no loaded machine hits (conformance races queue on row locks);
	// the fault tests set the short bounds they test.
	return Options{DSN: dsn, Schema: pgtest.Schema(t, dsn), MaxConns: 8,
		StatementTimeout: patience.Deadline, AcquireTimeout: patience.Deadline, ConnectTimeout: patience.Deadline}
}

// open is pgtest.Open without the cleanup: ledgertest closes the stores it
// gets, and its cases check that a second Close is harmless.
func open(t *testing.T, opts Options) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]Options{
		"no dsn":           {},
		"schema uppercase": {DSN: "postgres://x@127.0.0.1/db", Schema: "Itogate"},
		"schema quote":     {DSN: "postgres://x@127.0.0.1/db", Schema: `a"b`},
		"schema too long":  {DSN: "postgres://x@127.0.0.1/db", Schema: strings.Repeat("a", 64)},
		"negative conns":   {DSN: "postgres://x@127.0.0.1/db", MaxConns: -1},
		"negative timeout": {DSN: "postgres://x@127.0.0.1/db", StatementTimeout: -time.Second},
	} {
		if _, err := Open(t.Context(), o); err == nil || errors.Is(err, ledger.ErrUnavailable) {
			t.Errorf("%s: Open = %v, want a configuration error", name, err)
		}
	}
	// A DSN that does not parse is refused without echoing it: it may hold
	// a password.
	_, err := Open(t.Context(), Options{DSN: "postgres://user:s3cr3t@[::1/db"})
	if err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("Open(bad dsn) = %v", err)
	}
}

// TestUnreachable: a server that does not answer fails Open within the
// connect timeout, wrapped in ErrUnavailable, without the password.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	start := time.Now()
	// 192.0.2.0/24 is TEST-NET-1: never routed, so the connect hangs until
	// the timeout rather than being refused.
	_, err := Open(t.Context(), Options{
		DSN:            "postgres://itogate:s3cr3t@192.0.2.1:5432/itogate?sslmode=disable",
		ConnectTimeout: 300 * time.Millisecond, MigrationTimeout: 2 * time.Second,
	})
	if !errors.Is(err, ledger.ErrUnavailable) || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("Open(unreachable) = %v, want ErrUnavailable without the password", err)
	}
	// Unbounded, the connect would hang for the kernel's SYN retries (over
	// two minutes): returning within patience.Wait tells the two apart on
	// any machine, however loaded.
	if d := time.Since(start); d > patience.Wait {
		t.Fatalf("Open(unreachable) took %v", d)
	}
	// A refused port fails fast the same way.
	_, err = Open(t.Context(), Options{DSN: "postgres://itogate@127.0.0.1:1/itogate?sslmode=disable"})
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Open(refused) = %v, want ErrUnavailable", err)
	}
}

// TestMigrateConcurrently: replicas starting at once against an empty schema
// all come up, and each migration is applied exactly once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	opts.MaxConns = 2
	const replicas = 8
	var wg sync.WaitGroup
	stores := make([]*Store, replicas)
	errs := make([]error, replicas)
	start := make(chan struct{})
	for i := range replicas {
		wg.Go(func() {
			<-start
			stores[i], errs[i] = Open(t.Context(), opts)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("replica %d: Open: %v", i, err)
		}
		defer stores[i].Close()
	}
	var n, maxV int
	err := stores[0].pool.QueryRow(t.Context(),
		fmt.Sprintf("SELECT count(*), max(version) FROM %s.schema_migrations", pgx.Identifier{opts.Schema}.Sanitize()),
	).Scan(&n, &maxV)
	if err != nil || n != SchemaVersion() || maxV != SchemaVersion() {
		t.Fatalf("schema_migrations: %d rows, max %d, %v; want %d", n, maxV, err, SchemaVersion())
	}
	// Every replica serves: one deposits, another reads it.
	c := confirmation("acct_1")
	if err := stores[1].DepositConfirmation(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	if got, err := stores[7].Confirmation(t.Context(), c.Ref); err != nil || got.JTI != c.JTI {
		t.Fatalf("other replica reads %+v, %v", got, err)
	}
}

// TestSchemaNewerThanBinary: a database migrated by a newer binary is
// refused at Open, and a running replica turns unready.
func TestSchemaNewerThanBinary(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	s := open(t, opts)
	defer s.Close()
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	_, err := s.pool.Exec(t.Context(), fmt.Sprintf("INSERT INTO %s.schema_migrations (version, name) VALUES ($1, 'future')",
		pgx.Identifier{opts.Schema}.Sanitize()), SchemaVersion()+1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(t.Context()); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Ping after a newer migration = %v, want ErrUnavailable", err)
	}
	if _, err := Open(t.Context(), opts); !errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), "upgrade the binary") {
		t.Fatalf("Open(newer schema) = %v", err)
	}
}

// TestReopenKeepsRecords: a second Open on a migrated schema changes
// nothing and sees what the first wrote.
func TestReopenKeepsRecords(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	s := open(t, opts)
	c := confirmation("acct_1")
	if err := s.DepositConfirmation(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	a := admissionFor(c, "k1")
	if _, _, err := s.Commit(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, opts)
	defer s.Close()
	if got, err := s.Admission(t.Context(), "acct_1", "k1"); err != nil || got.RunID != a.RunID {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
}

// TestConnectionKilledMidTransaction: the backend running a Commit is
// terminated after the confirmation was marked consumed and before the
// admission row was written (a test trigger holds the INSERT in pg_sleep).
// Commit reports ErrUnavailable, the consumption is rolled back with the
// rest, and a retry under the same key is a fresh commit.
func TestConnectionKilledMidTransaction(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	var app string
	opts.DSN, app = pgtest.WithApp(opts.DSN, "itogate_kill", opts.Schema)
	s := open(t, opts)
	defer s.Close()
	ctx := t.Context()
	schema := pgx.Identifier{opts.Schema}.Sanitize()
	_, err := s.pool.Exec(ctx, fmt.Sprintf(`
		CREATE FUNCTION %[1]s.slow_insert() RETURNS trigger LANGUAGE plpgsql AS
			$$ BEGIN PERFORM pg_sleep(30); RETURN NEW; END $$;
		CREATE TRIGGER slow BEFORE INSERT ON %[1]s.admissions FOR EACH ROW EXECUTE FUNCTION %[1]s.slow_insert();`, schema))
	if err != nil {
		t.Fatal(err)
	}
	c := confirmation("acct_1")
	if err := s.DepositConfirmation(ctx, c); err != nil {
		t.Fatal(err)
	}
	a := admissionFor(c, "k1")
	done := make(chan error, 1)
	go func() { _, _, err := s.Commit(context.Background(), a); done <- err }()

	// Wait until the statement sleeps in the trigger: its UPDATE is done.
	var pid int
	deadline := time.Now().Add(patience.Wait)
	for {
		err := s.pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE application_name = $1 AND wait_event = 'PgSleep'`, app).Scan(&pid)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the commit never reached the trigger: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := pgtest.Exec(ctx, opts.DSN, "SELECT pg_terminate_backend($1)", pid); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Commit with its backend killed = %v, want ErrUnavailable", err)
	}
	if _, err := s.pool.Exec(ctx, fmt.Sprintf("DROP TRIGGER slow ON %s.admissions", schema)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Admission(ctx, "acct_1", "k1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Admission after the killed commit = %v, want ErrNotFound", err)
	}
	if _, err := s.Run(ctx, a.RunID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Run after the killed commit = %v, want ErrNotFound", err)
	}
	if got, err := s.Confirmation(ctx, c.Ref); err != nil || got.State != ledger.ConfirmationAvailable {
		t.Fatalf("confirmation after the killed commit: %q, %v; want available", got.State, err)
	}
	if _, replayed, err := s.Commit(ctx, a); err != nil || replayed {
		t.Fatalf("retry = replayed %v, %v", replayed, err)
	}
	if _, err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDatabaseGone: every method answers ErrUnavailable, within the
// timeouts, when every connection is terminated and the schema dropped
// from under the store.
func TestDatabaseGone(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	opts.StatementTimeout = time.Second
	s := open(t, opts)
	defer s.Close()
	ctx := t.Context()
	c := confirmation("acct_1")
	if err := s.DepositConfirmation(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Exec(ctx, opts.DSN, "DROP SCHEMA "+pgx.Identifier{opts.Schema}.Sanitize()+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	calls := map[string]func() error{
		"Ping":         func() error { return s.Ping(ctx) },
		"Deposit":      func() error { return s.DepositConfirmation(ctx, confirmation("acct_1")) },
		"Confirmation": func() error { _, err := s.Confirmation(ctx, c.Ref); return err },
		"Admission":    func() error { _, err := s.Admission(ctx, "acct_1", "k"); return err },
		"Run":          func() error { _, err := s.Run(ctx, ledger.NewRunID()); return err },
		"Commit":       func() error { _, _, err := s.Commit(ctx, admissionFor(c, "k")); return err },
		"Sweep":        func() error { _, err := s.Sweep(ctx, time.Now(), 0); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ledger.ErrUnavailable) {
			t.Errorf("%s without the schema = %v, want ErrUnavailable", name, err)
		}
	}
	if d := time.Since(start); d > patience.Wait {
		t.Fatalf("failing calls took %v", d)
	}
}

// TestLockWaitBounded: a transaction holding the confirmation's row lock
// (a stuck replica) makes Commit fail with ErrUnavailable after the
// statement timeout instead of hanging; released, the same Commit passes.
func TestLockWaitBounded(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	opts.StatementTimeout = 300 * time.Millisecond
	s := open(t, opts)
	defer s.Close()
	ctx := t.Context()
	c := confirmation("acct_1")
	if err := s.DepositConfirmation(ctx, c); err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(ctx, opts.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf("SELECT 1 FROM %s.confirmations WHERE ref = $1 FOR UPDATE",
		pgx.Identifier{opts.Schema}.Sanitize()), c.Ref); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a := admissionFor(c, "k1")
	if _, _, err := s.Commit(ctx, a); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Commit behind a held lock = %v, want ErrUnavailable", err)
	}
	// Without the statement timeout the Commit would wait for the lock,
	// held until after it returns: returning at all shows the bound.
	if d := time.Since(start); d > patience.Wait {
		t.Fatalf("Commit behind a held lock took %v", d)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, replayed, err := s.Commit(ctx, a); err != nil || replayed {
		t.Fatalf("Commit after release = replayed %v, %v", replayed, err)
	}
}

// TestPoolExhaustedBounded: with every pooled connection busy, a call waits
// at most AcquireTimeout and answers ErrUnavailable.
func TestPoolExhaustedBounded(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	opts.MaxConns, opts.AcquireTimeout = 1, 200*time.Millisecond
	s := open(t, opts)
	defer s.Close()
	held, err := s.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Ping(t.Context()); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Ping with the pool exhausted = %v, want ErrUnavailable", err)
	}
	// Without AcquireTimeout the Ping would wait for the held connection,
	// released only after it returns: returning at all shows the bound.
	if d := time.Since(start); d > patience.Wait {
		t.Fatalf("Ping with the pool exhausted took %v", d)
	}
	held.Release()
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("Ping after release: %v", err)
	}
}

// TestCommitDeadline: a Commit whose ctx ends while its statement waits on
// a row lock returns an error wrapping the ctx's; the store has the server
// cancel the statement, so nothing is written — not even once the lock is
// released, which is when a statement merely abandoned by its client would
// have committed.
func TestCommitDeadline(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	s := open(t, opts)
	defer s.Close()
	c := confirmation("acct_1")
	if err := s.DepositConfirmation(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(t.Context(), opts.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	tx, err := holder.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), fmt.Sprintf("SELECT 1 FROM %s.confirmations WHERE ref = $1 FOR UPDATE",
		pgx.Identifier{opts.Schema}.Sanitize()), c.Ref); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, _, err = s.Commit(ctx, admissionFor(c, "k1"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Commit past its deadline = %v, want DeadlineExceeded", err)
	}
	// The cancel request pgx sends at the deadline reaches the server
	// asynchronously: on a loaded machine a rollback now could free the
	// lock first and the statement would commit — an outcome Commit's
	// contract allows (ErrUnavailable: unknown), not the one pinned here.
	// So wait until the server has ended the statement the holder blocks.
	waitNotBlocking(t, opts.DSN, holder.PgConn().PID())
	_ = tx.Rollback(t.Context())
	time.Sleep(300 * time.Millisecond) // time enough for an abandoned statement to commit
	if got, err := s.Confirmation(t.Context(), c.Ref); err != nil || got.State != ledger.ConfirmationAvailable {
		t.Fatalf("confirmation: %q, %v", got.State, err)
	}
	if _, err := s.Admission(t.Context(), "acct_1", "k1"); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("Admission = %v, want ErrNotFound", err)
	}
	// A ctx already over before the call writes nothing and is the
	// caller's error alone.
	_, _, err = s.Commit(ctx, admissionFor(c, "k1"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Commit with an expired ctx = %v", err)
	}
}

// waitNotBlocking waits, up to patience.Deadline, until no backend waits
// on a lock the backend pid holds (pg_blocking_pids), polling on a
// connection of its own: pg_stat_activity is one snapshot per transaction.
func waitNotBlocking(t *testing.T, dsn string, pid uint32) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(patience.Deadline)
	for {
		var n int
		if err := conn.QueryRow(t.Context(),
			"SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))", int32(pid)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statements still wait on backend %d after %v", n, pid, patience.Deadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var seq struct {
	sync.Mutex
	n int
}

func confirmation(account string) ledger.Confirmation {
	seq.Lock()
	seq.n++
	n := seq.n
	seq.Unlock()
	now := time.Now().UTC().Truncate(time.Microsecond)
	return ledger.Confirmation{
		Ref: ledger.NewConfirmationRef(), JTI: fmt.Sprintf("jti-%d-%s", n, ledger.NewConfirmationRef()[4:12]),
		Account: account, Action: "train.create", Token: []byte("h.p.s"),
		ExpiresAt: now.Add(10 * time.Minute), DepositedAt: now, BookingID: "bk_1",
	}
}

func admissionFor(c ledger.Confirmation, key string) ledger.Admission {
	sum := sha256.Sum256([]byte(key))
	return ledger.Admission{
		Account: c.Account, IdempotencyKey: key, RequestDigest: "sha256:" + hex.EncodeToString(sum[:]),
		DecisionID: "dec_1", RunID: ledger.NewRunID(), Action: c.Action, BookingID: "bk_1",
		ConfirmationRef: c.Ref, ConfirmationJTI: c.JTI, State: api.StateAdmitted, CreatedAt: time.Now(),
		GPUs: 1, BookedGPUs: 1 << 20, LiveUntil: time.Now().Add(time.Hour),
	}
}

// TestCheckFindsHalfWrites: Check reports a consumed confirmation without
// its admission (constraints cannot express that one).
func TestCheckFindsHalfWrites(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	s := open(t, opts)
	defer s.Close()
	ctx := t.Context()
	c := confirmation("acct_1")
	if err := s.DepositConfirmation(ctx, c); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.Check(ctx); err != nil || rep.Available != 1 || rep.Confirmations != 1 {
		t.Fatalf("Check on a sound ledger = %+v, %v", rep, err)
	}
	_, err := s.pool.Exec(ctx, fmt.Sprintf(`UPDATE %s.confirmations SET state = 'consumed', consumed_by = 'ghost-key',
		consumed_at = now() WHERE ref = $1`, pgx.Identifier{opts.Schema}.Sanitize()), c.Ref)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Check(ctx)
	if !errors.Is(err, ledger.ErrInconsistent) || !strings.Contains(err.Error(), "consumed by ghost-key without an admission") {
		t.Fatalf("Check = %v, want ErrInconsistent naming the half-write", err)
	}
}

// TestNetworkStalledBounded: the database stops answering without closing
// anything (a partition: statement_timeout never fires, the server never
// sees the statement). Every call, Commit included — the server runs it
// without the request's deadline — fails with ErrUnavailable within the
// client-side bounds, and the store works again once the network does.
func TestNetworkStalledBounded(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	proxy, dsn := pgtest.NewProxy(t, opts.DSN)
	opts.DSN, opts.StatementTimeout, opts.ConnectTimeout, opts.AcquireTimeout = dsn, 300*time.Millisecond, 500*time.Millisecond, 500*time.Millisecond
	s := open(t, opts)
	defer s.Close()
	ctx := context.Background() // no deadline: the bounds must come from the store
	c := confirmation("acct_1")
	if err := s.DepositConfirmation(ctx, c); err != nil {
		t.Fatal(err)
	}
	a := admissionFor(c, "k1")

	proxy.Stall(true)
	for name, call := range map[string]func() error{
		"Commit":    func() error { _, _, err := s.Commit(ctx, a); return err },
		"Admission": func() error { _, err := s.Admission(ctx, "acct_1", "k1"); return err },
		"Ping":      func() error { return s.Ping(ctx) },
	} {
		start := time.Now()
		if err := call(); !errors.Is(err, ledger.ErrUnavailable) {
			t.Errorf("%s on a stalled network = %v, want ErrUnavailable", name, err)
		}
		// Commit: acquire (0.5s) + two statements' worth (2 × 1.3s) when
		// idle; unbounded, it would hang while the network stalls.
		if d := time.Since(start); d > patience.Wait {
			t.Errorf("%s on a stalled network took %v", name, d)
		}
	}
	proxy.Stall(false)
	proxy.Cut() // drop the connections the stall poisoned
	proxy.Restore()

	// The outcome of the stalled Commit was unknown to the caller; the
	// server never saw a COMMIT, so a retry with the same key is fresh.
	deadline := time.Now().Add(patience.Wait)
	for {
		_, replayed, err := s.Commit(ctx, a)
		if err == nil {
			if replayed {
				t.Fatal("the stalled Commit was committed")
			}
			break
		}
		if !errors.Is(err, ledger.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("Commit after the network came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestNetworkCut: connections refused → ErrUnavailable at once; back →
// the pool reconnects.
func TestNetworkCut(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	proxy, dsn := pgtest.NewProxy(t, opts.DSN)
	opts.DSN = dsn
	s := open(t, opts)
	defer s.Close()
	ctx := context.Background()
	proxy.Cut()
	start := time.Now()
	if err := s.Ping(ctx); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Ping with the network cut = %v", err)
	}
	if err := s.DepositConfirmation(ctx, confirmation("acct_1")); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("Deposit with the network cut = %v", err)
	}
	if d := time.Since(start); d > patience.Wait {
		t.Fatalf("calls with the network cut took %v", d)
	}
	proxy.Restore()
	deadline := time.Now().Add(patience.Wait)
	for s.Ping(ctx) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Ping after restore: %v", s.Ping(ctx))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReadsSurviveTerminatedBackends: after every backend of the pool is
// terminated (a failover, an operator's pg_terminate_backend), the pool still
// holds those connections; the next reads must answer, not fail one request
// per dead connection. Writes are not retried (their outcome may be unknown).
func TestReadsSurviveTerminatedBackends(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	base := opts.DSN
	var app string
	opts.DSN, app = pgtest.WithApp(opts.DSN, "itogate_term", opts.Schema)
	s := open(t, opts)
	defer s.Close()
	ctx := t.Context()
	c := confirmation("acct_term")
	if err := s.DepositConfirmation(ctx, c); err != nil {
		t.Fatal(err)
	}
	// Fill the pool with idle connections.
	var wg sync.WaitGroup
	for range opts.MaxConns {
		wg.Go(func() {
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(50 * time.Millisecond)
			conn.Release()
		})
	}
	wg.Wait()
	idle := s.pool.Stat().IdleConns()
	if idle < 2 {
		t.Fatalf("%d idle connections; the test needs several", idle)
	}
	killer, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close(ctx)
	var killed int
	if err := killer.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1`, app).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != int(idle) {
		t.Fatalf("terminated %d backends, the pool held %d idle connections", killed, idle)
	}
	for i := range 3 {
		got, err := s.Confirmation(ctx, c.Ref)
		if err != nil || got.JTI != c.JTI {
			t.Fatalf("read %d after the backends were terminated: %+v, %v", i, got, err)
		}
		if _, err := s.Admission(ctx, "acct_term", "no-such-key"); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("admission read %d: %v, want ErrNotFound", i, err)
		}
	}
}

// TestCapacityRaceTwoReplicas: two stores (replicas) on one schema, each
// with its own pool, race 2, 10 and 50 full-booking creates on one booking:
// exactly one is allowed, and Check finds held GPUs within the booking.
func TestCapacityRaceTwoReplicas(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	a, b := open(t, opts), open(t, opts)
	defer a.Close()
	defer b.Close()
	for _, n := range []int{2, 10, 50} {
		ledgertest.CapacityRace(t, []ledger.Store{a, b}, fmt.Sprintf("bk_replicas_%d", n), n)
	}
	if rep, err := a.Check(t.Context()); err != nil || rep.Runs != 3 {
		t.Fatalf("Check = %+v, %v; want 3 runs and no problem", rep, err)
	}
}

// TestRunRacesTwoReplicas: the run's state races of the conformance suite
// on two stores (replicas) sharing one schema: restarts racing a booking
// revocation and a halt, creates racing their entitlement's revocation, an
// advance racing a halt, a halt racing a passing report, restarts at a
// stage's report deadline racing its report, advances of one run from one
// stage racing each other, a stage advance that grows its run racing
// creates for the booking's last GPUs, child workloads racing for the
// run's last GPUs; Check finds every event admissible and no booking over
// its GPUs afterwards.
func TestRunRacesTwoReplicas(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	a, b := open(t, opts), open(t, opts)
	defer a.Close()
	defer b.Close()
	stores := []ledger.Store{a, b}
	for _, n := range []int{2, 10, 30} {
		ledgertest.RaceRevokeRestart(t, stores, fmt.Sprintf("bk_rr2_%d", n), n)
		ledgertest.RaceHaltRestart(t, stores, fmt.Sprintf("bk_hr2_%d", n), n)
		ledgertest.RaceRevokeCreate(t, stores, fmt.Sprintf("ent-race2-%d", n), n)
	}
	for i := range 10 {
		ledgertest.RaceHaltAdvance(t, stores, fmt.Sprintf("bk_ha2_%d", i))
		ledgertest.RaceHaltReport(t, stores, fmt.Sprintf("bk_hrp2_%d", i))
	}
	for _, n := range []int{2, 10, 30} {
		ledgertest.RaceReportRestart(t, stores, fmt.Sprintf("bk_rpr2_%d", n), n)
		ledgertest.ConcurrentStageAdvances(t, stores, fmt.Sprintf("bk_csa2_%d", n), n)
	}
	for _, n := range []int{2, 10, 30} {
		ledgertest.RaceRestartBudget(t, stores, fmt.Sprintf("bk_rb2_%d", n), n, 1+n/3)
		ledgertest.RaceJobBind(t, stores, fmt.Sprintf("bk_jb2_%d", n), n)
		ledgertest.RaceGrowCreate(t, stores, fmt.Sprintf("bk_gc2_%d", n), n)
		ledgertest.RaceJobWorkloadBind(t, stores, fmt.Sprintf("bk_jw2_%d", n), n)
		ledgertest.RaceWorkloadCharges(t, stores, fmt.Sprintf("bk_wc2_%d", n), n)
	}
	if _, err := a.Check(t.Context()); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

// TestMigrateSchema5: a schema at version 5 (no run state, events or
// booking accounts: what this store wrote, taken back to version 5) is
// migrated to 6 with each run's events written from its admissions exactly
// as the store wrote them, its restarts and entitlement, each booking bound
// to its account; it passes Check and answers ledgertest.BookingHistory
// and ledgertest.RunLifeHistory as before.
func TestMigrateSchema5(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	s := open(t, opts)
	verify := ledgertest.BookingHistory(t, s)
	extra := ledgertest.RunLifeHistory(t, s)
	schema := pgx.Identifier{opts.Schema}.Sanitize()
	rows, err := s.pool.Query(t.Context(), "SELECT "+runCols+" FROM "+schema+".runs")
	if err != nil {
		t.Fatal(err)
	}
	runs, err := pgx.CollectRows(rows, scanRunRow)
	if err != nil || len(runs) < 10 {
		t.Fatalf("runs before: %d, %v", len(runs), err)
	}
	want := map[string][]ledger.RunEvent{}
	for _, r := range runs {
		if want[r.RunID], err = s.RunEvents(t.Context(), r.RunID); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.pool.Exec(t.Context(), strings.ReplaceAll(`
		DROP TABLE {s}.run_events;
		DROP INDEX {s}.runs_entitlement_idx;
		ALTER TABLE {s}.runs DROP CONSTRAINT runs_restarts_check, DROP CONSTRAINT runs_halt_check,
			DROP CONSTRAINT runs_revocation_check,
			DROP COLUMN entitlement_jti, DROP COLUMN restarts, DROP COLUMN last_checkpoint_step,
			DROP COLUMN halted_at, DROP COLUMN halt_decision_id, DROP COLUMN halt_stage, DROP COLUMN halt_report_digest,
			DROP COLUMN halt_failed_evals, DROP COLUMN halted_by, DROP COLUMN revoked_at, DROP COLUMN revocation_kind,
			DROP COLUMN revocation_subject, DROP COLUMN revoked_by, DROP COLUMN revocation_reason,
			DROP COLUMN revocation_decision_id;
		DELETE FROM {s}.bookings WHERE released_at IS NULL;
		ALTER TABLE {s}.bookings DROP CONSTRAINT bookings_account_check, DROP CONSTRAINT bookings_released_check,
			DROP COLUMN account, DROP COLUMN bound_at,
			ALTER COLUMN released_at SET NOT NULL, ALTER COLUMN released_by SET NOT NULL;
		ALTER TABLE {s}.revocations DROP COLUMN decision_id;
		ALTER TABLE {s}.runs DROP CONSTRAINT runs_plan_check, DROP COLUMN plan_interval_steps, DROP COLUMN plan_steps,
			DROP COLUMN plan_wall_clock_seconds, DROP COLUMN plan_lost_seconds;
		ALTER TABLE {s}.runs DROP CONSTRAINT runs_storage_check, DROP COLUMN plan_checkpoint_gib,
			DROP COLUMN plan_storage_quota_gib;
		DROP INDEX {s}.runs_account_idx;
		DROP TABLE {s}.run_jobs;
		DROP TABLE {s}.workload_charges;
		ALTER TABLE {s}.workload_bindings DROP COLUMN active_uid;
		ALTER TABLE {s}.workload_uids DROP COLUMN root_uid;
		DROP TABLE {s}.restore_hold;
		ALTER TABLE {s}.runs DROP CONSTRAINT runs_report_check, DROP COLUMN report_due, DROP COLUMN report_at,
			DROP COLUMN report_decision_id, DROP COLUMN report_stage, DROP COLUMN report_digest, DROP COLUMN report_by;
		DELETE FROM {s}.schema_migrations WHERE version >= 6;`, "{s}", schema))
	if err != nil {
		t.Fatalf("back to version 5: %v", err)
	}
	s.Close()
	var logs syncbuf.Buffer
	opts.Log = slog.New(slog.NewTextHandler(&logs, nil))
	s = open(t, opts)
	defer s.Close()
	// One log line per migration applied, in order.
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != len(ms)-5 {
		t.Fatalf("migration log:\n%s\nwant %d lines", logs.String(), len(ms)-5)
	}
	for i, m := range ms[5:] {
		want := fmt.Sprintf(`msg="ledger migration applied" store=postgres schema=%s from=%d to=%d name=%s duration=`,
			opts.Schema, m.version-1, m.version, m.name)
		if !strings.Contains(lines[i], want) {
			t.Errorf("migration log line %d: %s\nwant %s", i, lines[i], want)
		}
	}
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check after migration: %v", err)
	}
	for _, r := range runs {
		got, err := s.RunRecord(t.Context(), r.RunID)
		if err != nil || !got.Equal(r) {
			t.Fatalf("RunRecord(%s) after migration = %+v, %v\nwant %+v", r.RunID, got, err, r)
		}
		events, err := s.RunEvents(t.Context(), r.RunID)
		if err != nil || !reflect.DeepEqual(events, want[r.RunID]) {
			t.Fatalf("RunEvents(%s) after migration = %+v, %v\nwant %+v", r.RunID, events, err, want[r.RunID])
		}
	}
	verify(t, s)
	extra(t, s)
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check after the migrated store committed: %v", err)
	}
}

// TestMigrateSchema13: a schema at version 13 (events without GPUs: what
// this store wrote, taken back) is migrated to 14 with each run's
// train.create event carrying the GPUs its run holds (no run of version 13
// grew): every event reads back as the store wrote it, Check passes, and a
// stage advance that grows a run commits on the migrated schema.
func TestMigrateSchema13(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	s := open(t, opts)
	verify := ledgertest.RunLifeHistory(t, s)
	schema := pgx.Identifier{opts.Schema}.Sanitize()
	rows, err := s.pool.Query(t.Context(), "SELECT "+runCols+" FROM "+schema+".runs")
	if err != nil {
		t.Fatal(err)
	}
	runs, err := pgx.CollectRows(rows, scanRunRow)
	if err != nil || len(runs) == 0 {
		t.Fatalf("runs before: %d, %v", len(runs), err)
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
	_, err = s.pool.Exec(t.Context(), strings.ReplaceAll(`
		DROP TABLE {s}.workload_charges;
		ALTER TABLE {s}.run_events DROP CONSTRAINT run_events_gpus_check, DROP COLUMN gpus;
		DELETE FROM {s}.schema_migrations WHERE version >= 14;`, "{s}", schema))
	if err != nil {
		t.Fatalf("back to version 13: %v", err)
	}
	s.Close()
	s = open(t, opts)
	defer s.Close()
	if _, err := s.Check(t.Context()); err != nil {
		t.Fatalf("Check after migration: %v", err)
	}
	for _, r := range runs {
		events, err := s.RunEvents(t.Context(), r.RunID)
		if err != nil || !reflect.DeepEqual(events, want[r.RunID]) {
			t.Fatalf("RunEvents(%s) after migration = %+v, %v\nwant %+v", r.RunID, events, err, want[r.RunID])
		}
	}
	verify(t, s)
	ledgertest.RaceGrowCreate(t, []ledger.Store{s}, "bk_migrated_grow", 2)
}

// TestCheckFindsRunStateFaults: Check replays each run's events through
// RunRecord.May and reports a restart written after the run's halt, and an
// admission on a run without its event.
func TestCheckFindsRunStateFaults(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	s := open(t, opts)
	defer s.Close()
	ctx := t.Context()
	c := confirmation("acct_1")
	if err := s.DepositConfirmation(ctx, c); err != nil {
		t.Fatal(err)
	}
	a := admissionFor(c, "k1")
	a.Stage = "pretrain"
	if _, _, err := s.Commit(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, halted, err := s.HaltRun(ctx, ledger.Halt{RunID: a.RunID, Account: "acct_1", BookingID: "bk_1",
		RunHalt: ledger.RunHalt{At: a.CreatedAt, DecisionID: "dec_halt", Stage: "pretrain",
			ReportDigest: "sha256:" + strings.Repeat("e", 64), FailedEvals: []string{"mmlu_5shot"}, By: "evals:k"}}); err != nil || !halted {
		t.Fatalf("HaltRun = %v, %v", halted, err)
	}
	if _, err := s.Check(ctx); err != nil {
		t.Fatalf("Check on a sound ledger = %v", err)
	}
	schema := pgx.Identifier{opts.Schema}.Sanitize()
	_, err := s.pool.Exec(ctx, `INSERT INTO `+schema+`.run_events (`+eventCols+`)
		VALUES ($1, $2, 'live', 'train.restart', 'dec_ghost', 'acct_1', '', '', 500, NULL, 0)`, a.RunID, a.CreatedAt.Add(time.Second))
	if err == nil {
		_, err = s.pool.Exec(ctx, `DELETE FROM `+schema+`.run_events WHERE decision_id = $1`, a.DecisionID)
	}
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

// TestCheckFindsOvercharge: Check reports the children of one owner
// charged more GPUs than their run holds, and a charge whose uid is not
// of its binding (ledger.CheckCharges, in SQL).
func TestCheckFindsOvercharge(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	s := open(t, opts)
	defer s.Close()
	ctx := t.Context()
	c := confirmation("acct_1")
	if err := s.DepositConfirmation(ctx, c); err != nil {
		t.Fatal(err)
	}
	a := admissionFor(c, "k1") // a run of 1 GPU
	if _, _, err := s.Commit(ctx, a); err != nil {
		t.Fatal(err)
	}
	for _, b := range []ledger.WorkloadBind{
		{RunID: a.RunID, Identity: "jobset.x-k8s.io/JobSet/team-a/train", UID: "js-1", At: a.CreatedAt},
		{RunID: a.RunID, Identity: "batch/Job/team-a/train-a", UID: "job-a", OwnerUID: "js-1", GPUs: 1, At: a.CreatedAt},
	} {
		if _, err := s.BindWorkload(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Check(ctx); err != nil {
		t.Fatalf("Check on a sound ledger = %v", err)
	}
	schema := pgx.Identifier{opts.Schema}.Sanitize()
	if _, err := s.pool.Exec(ctx, `UPDATE `+schema+`.workload_charges SET gpus = 5, uid = 'ghost' WHERE run_id = $1`, a.RunID); err != nil {
		t.Fatal(err)
	}
	_, err := s.Check(ctx)
	for _, want := range []string{"the children of js-1 are charged 5 GPUs, the run holds 1", "of uid ghost under js-1 is not of the binding's uids"} {
		if !errors.Is(err, ledger.ErrInconsistent) || !strings.Contains(err.Error(), want) {
			t.Errorf("Check = %v, want ErrInconsistent saying %q", err, want)
		}
	}
}
