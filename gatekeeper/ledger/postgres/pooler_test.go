package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/ledgertest"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres/pgtest"
	"github.com/itocompute/itogate/internal/patience"
)

// poolerOptions are testOptions through the PgBouncer in transaction mode
// of ITOGATE_TEST_PGBOUNCER_DSN; the schema is created and dropped on the
// server directly.
func poolerOptions(t *testing.T) Options {
	t.Helper()
	opts := testOptions(t)
	opts.DSN = pgtest.PoolerDSN(t)
	opts.Pooler = PoolerTransaction
	return opts
}

// TestPoolerConformance runs the ledger conformance suite through a real
// PgBouncer in transaction mode (hack/test-pgbouncer.sh), with
// ledger.pooler: transaction.
func TestPoolerConformance(t *testing.T) {
	pgtest.PoolerDSN(t)
	ledgertest.Run(t, func(t *testing.T) ledger.Store {
		return open(t, poolerOptions(t))
	})
}

// TestPoolerConcurrentAdmissions: 24 admissions at once through the pooler,
// each with its own confirmation, all commit (with named prepared
// statements, most failed once the pooler handed a statement to a server
// connection that had not prepared it), and two replicas on one schema
// agree. Every operation's transaction runs with the store's settings,
// which the pooler would otherwise have dropped with the startup
// parameters.
func TestPoolerConcurrentAdmissions(t *testing.T) {
	t.Parallel()
	opts := poolerOptions(t)
	a, b := open(t, opts), open(t, opts)
	defer a.Close()
	defer b.Close()
	ctx := t.Context()
	const n = 24
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			s := a
			if i%2 == 1 {
				s = b
			}
			c := confirmation("acct_1")
			if errs[i] = s.DepositConfirmation(ctx, c); errs[i] != nil {
				return
			}
			_, replayed, err := s.Commit(ctx, admissionFor(c, fmt.Sprintf("key-%d", i)))
			if err == nil && replayed {
				err = errors.New("replayed")
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("admission %d: %v", i, err)
		}
	}
	rep, err := b.Check(ctx)
	if err != nil || rep.Admissions != n || rep.Consumed != n {
		t.Fatalf("Check = %+v, %v; want %d admissions, %d consumed", rep, err, n, n)
	}

	// The settings hold inside the store's transactions, whichever server
	// connection runs them; outside, the pooler's connection has the
	// server's defaults (PostgreSQL's statement_timeout is 0).
	conn, err := a.acquire(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var timeout, idle, iso string
	b2 := &pgx.Batch{}
	b2.Queue("SELECT current_setting('statement_timeout'), current_setting('idle_in_transaction_session_timeout'), current_setting('transaction_isolation')")
	br := conn.SendBatch(ctx, b2)
	if err := br.QueryRow().Scan(&timeout, &idle, &iso); err != nil {
		t.Fatal(err)
	}
	if err := br.Close(); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%dms", opts.StatementTimeout.Milliseconds())
	if timeout != pgDuration(opts.StatementTimeout) || idle != pgDuration(2*opts.StatementTimeout) || iso != "read committed" {
		t.Fatalf("inside a store transaction: statement_timeout %q, idle_in_transaction_session_timeout %q, isolation %q; "+
			"want %s, twice that, read committed", timeout, idle, iso, want)
	}
	if err := conn.QueryRow(ctx, "SELECT current_setting('statement_timeout')").Scan(&timeout); err != nil || timeout != pgDuration(opts.StatementTimeout) {
		t.Fatalf("one-statement transaction: statement_timeout %q, %v", timeout, err)
	}
	if conn.Conn.Conn().PgConn().TxStatus() != 'I' {
		t.Fatalf("connection left in a transaction: %c", conn.Conn.Conn().PgConn().TxStatus())
	}
}

// pgDuration is d as PostgreSQL's current_setting shows a time setting.
func pgDuration(d time.Duration) string {
	ms := d.Milliseconds()
	switch {
	case ms%(60*60*1000) == 0:
		return fmt.Sprintf("%dh", ms/(60*60*1000))
	case ms%(60*1000) == 0:
		return fmt.Sprintf("%dmin", ms/(60*1000))
	case ms%1000 == 0:
		return fmt.Sprintf("%ds", ms/1000)
	}
	return fmt.Sprintf("%dms", ms)
}

// TestPoolerFailedTransactionRolledBack: a statement that fails through
// the pooler leaves no transaction open on the connection (the pooler
// would otherwise keep its server connection for this client), and the
// next operation on the store works.
func TestPoolerFailedTransactionRolledBack(t *testing.T) {
	t.Parallel()
	s := open(t, poolerOptions(t))
	defer s.Close()
	ctx := t.Context()
	c := confirmation("acct_1")
	if err := s.DepositConfirmation(ctx, c); err != nil {
		t.Fatal(err)
	}
	err := s.DepositConfirmation(ctx, c)
	if !errors.Is(err, ledger.ErrConfirmationDuplicate) {
		t.Fatalf("second deposit = %v, want ErrConfirmationDuplicate", err)
	}
	conn, err := s.acquire(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "SELECT 1/0")
	if st := conn.Conn.Conn().PgConn().TxStatus(); err == nil || st != 'I' {
		t.Fatalf("SELECT 1/0 = %v, transaction status %c; want an error and an idle connection", err, st)
	}
	conn.Release()
	got, err := s.Confirmation(ctx, c.Ref)
	if err != nil || got.JTI != c.JTI {
		t.Fatalf("Confirmation = %+v, %v", got, err)
	}
}

// TestPoolerStockConfigRefused: without ledger.pooler: transaction, a
// stock PgBouncer in transaction mode refuses the session settings itogate
// sends as startup parameters, and Open says which setting fixes it.
func TestPoolerStockConfigRefused(t *testing.T) {
	t.Parallel()
	opts := poolerOptions(t)
	opts.Pooler = ""
	opts.ConnectTimeout, opts.MigrationTimeout = patience.Deadline, patience.Deadline
	ctx, cancel := context.WithTimeout(t.Context(), patience.Wait)
	defer cancel()
	_, err := Open(ctx, opts)
	if !errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), "set ledger.pooler: transaction") {
		t.Fatalf("Open through a transaction pooler without pooler mode = %v, want ErrUnavailable naming ledger.pooler", err)
	}
}

// TestPoolerNamesMatchConfig: the configuration's pooler names are the
// store's (config mirrors them without importing the driver).
func TestPoolerNamesMatchConfig(t *testing.T) {
	if config.PoolerNone != PoolerNone || config.PoolerTransaction != PoolerTransaction {
		t.Fatalf("config pooler names %q, %q; store %q, %q", config.PoolerNone, config.PoolerTransaction, PoolerNone, PoolerTransaction)
	}
	for _, m := range []string{"", PoolerNone, PoolerTransaction} {
		if !ValidPooler(m) {
			t.Errorf("ValidPooler(%q) = false", m)
		}
	}
	if ValidPooler("session") {
		t.Error(`ValidPooler("session") = true`)
	}
}

// TestSessionSettingsChecked: a connection whose startup parameters were
// dropped on the way — what a transaction pooler told to ignore them does
// (PgBouncer's ignore_startup_parameters, the usual workaround) — is
// refused, naming ledger.pooler, instead of running with no server-side
// statement timeout. The proxy here drops every startup parameter but the
// user, database and application_name.
func TestSessionSettingsChecked(t *testing.T) {
	t.Parallel()
	opts := testOptions(t)
	opts.DSN = stripStartupProxy(t, opts.DSN)
	_, err := Open(t.Context(), opts)
	if !errors.Is(err, ledger.ErrUnavailable) || !strings.Contains(err.Error(), "statement_timeout is 0 ms") ||
		!strings.Contains(err.Error(), "set ledger.pooler: transaction") {
		t.Fatalf("Open with the startup parameters dropped = %v, want ErrUnavailable naming ledger.pooler", err)
	}
	// Through the same proxy, pooler mode sets what it needs per
	// transaction and works.
	opts.Pooler = PoolerTransaction
	s := open(t, opts)
	defer s.Close()
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// stripStartupProxy forwards connections to dsn's server, passing on only
// the user, database and application_name of each startup message. It
// returns dsn pointing at it (sslmode=disable: the test server's).
func stripStartupProxy(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Skipf("the proxy needs a postgres:// URL DSN with a host in %s", pgtest.EnvDSN)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				be := pgproto3.NewBackend(c, c)
				msg, err := be.ReceiveStartupMessage()
				sm, ok := msg.(*pgproto3.StartupMessage)
				if err != nil || !ok {
					return
				}
				kept := map[string]string{}
				for _, k := range []string{"user", "database", "application_name"} {
					if v, ok := sm.Parameters[k]; ok {
						kept[k] = v
					}
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				buf, err := (&pgproto3.StartupMessage{ProtocolVersion: sm.ProtocolVersion, Parameters: kept}).Encode(nil)
				if err != nil {
					return
				}
				if _, err := up.Write(buf); err != nil {
					return
				}
				go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return u.String()
}
