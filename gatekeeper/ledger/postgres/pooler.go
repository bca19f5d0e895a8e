package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pooler modes (Options.Pooler).
const (
	// PoolerNone: the store connects to PostgreSQL itself, or through a
	// pooler in session mode. Session settings travel as startup
	// parameters and statements are prepared once per connection.
	PoolerNone = "none"
	// PoolerTransaction: the store connects through a pooler in
	// transaction mode (PgBouncer pool_mode=transaction, …), which hands
	// each transaction to any server connection and drops startup
	// parameters. No named prepared statement is used (pgx's exec mode:
	// one unnamed statement per query, parameters sent with it), nothing is
	// set for the session, and every operation is one explicit transaction
	// that sets its own isolation level, statement_timeout,
	// idle_in_transaction_session_timeout and (PostgreSQL 14+)
	// client_connection_check_interval with set_config(…, true), i.e.
	// SET LOCAL.
	PoolerTransaction = "transaction"
)

// ValidPooler reports whether mode may be used as Options.Pooler.
func ValidPooler(mode string) bool {
	return mode == "" || mode == PoolerNone || mode == PoolerTransaction
}

// txConn is a pooled connection as the store's operations use it. Through
// a transaction pooler (local != "") every statement, batch and
// transaction it runs is wrapped in BEGIN ISOLATION LEVEL READ COMMITTED,
// the local settings, and COMMIT, sent in the same round trip as the
// work; otherwise it is the pgx connection unchanged.
type txConn struct {
	*pgxpool.Conn
	// local is the statement that sets the transaction's settings
	// (localSettings); "" when not behind a transaction pooler.
	local string
}

// localSettings is the SELECT that sets, for the rest of the transaction
// only, what a direct connection sets once as startup parameters.
func localSettings(o Options) string {
	ms := o.StatementTimeout.Milliseconds()
	return fmt.Sprintf("SELECT set_config('statement_timeout', '%d', true), "+
		"set_config('idle_in_transaction_session_timeout', '%d', true), "+
		"CASE WHEN current_setting('server_version_num')::int >= 140000 "+
		"THEN set_config('client_connection_check_interval', '1000', true) END", ms, 2*ms)
}

const beginReadCommitted = "BEGIN ISOLATION LEVEL READ COMMITTED"

// wrap returns b inside the transaction: BEGIN, the local settings, b's
// queries, COMMIT.
func (c *txConn) wrap(b *pgx.Batch) *pgx.Batch {
	w := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+3)}
	w.Queue(beginReadCommitted)
	w.Queue(c.local)
	w.QueuedQueries = append(w.QueuedQueries, b.QueuedQueries...)
	w.Queue("COMMIT")
	return w
}

// SendBatch runs b as one transaction in one round trip.
func (c *txConn) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if c.local == "" {
		return c.Conn.SendBatch(ctx, b)
	}
	return &txBatch{BatchResults: c.Conn.SendBatch(ctx, c.wrap(b)), c: c, ctx: ctx}
}

// Exec runs one statement as one transaction.
func (c *txConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if c.local == "" {
		return c.Conn.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := c.SendBatch(ctx, b)
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// QueryRow runs one query as one transaction; the row's Scan ends it.
func (c *txConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if c.local == "" {
		return c.Conn.QueryRow(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := c.SendBatch(ctx, b)
	return &txRow{br: br, row: br.QueryRow()}
}

// Query runs one query as one transaction, ended when the rows are read
// to the end or closed.
func (c *txConn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if c.local == "" {
		return c.Conn.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := c.SendBatch(ctx, b)
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &txRows{Rows: rows, br: br}, nil
}

// Begin starts a READ COMMITTED transaction.
func (c *txConn) Begin(ctx context.Context) (pgx.Tx, error) {
	return c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
}

// BeginTx starts a transaction; through a transaction pooler its BEGIN
// and local settings are one round trip (simple protocol, no arguments),
// and a transaction with no isolation level is READ COMMITTED.
func (c *txConn) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	if c.local == "" {
		return c.Conn.BeginTx(ctx, opts)
	}
	if opts.IsoLevel == "" {
		opts.IsoLevel = pgx.ReadCommitted
	}
	begin := "BEGIN ISOLATION LEVEL " + strings.ToUpper(string(opts.IsoLevel))
	if opts.AccessMode != "" {
		begin += " " + strings.ToUpper(string(opts.AccessMode))
	}
	return c.Conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: begin + "; " + c.local})
}

// txBatch reads a wrapped batch's results as the caller's: BEGIN and the
// settings are consumed first, COMMIT by Close. A transaction the server
// left open or failed (an error mid-batch) is rolled back, so the pooler
// gets its server connection back idle.
type txBatch struct {
	pgx.BatchResults
	c       *txConn
	ctx     context.Context
	started bool
	closed  bool
	err     error
}

func (t *txBatch) start() error {
	if !t.started {
		t.started = true
		if _, err := t.BatchResults.Exec(); err != nil {
			t.err = err
		} else if _, err := t.BatchResults.Exec(); err != nil {
			t.err = err
		}
	}
	return t.err
}

func (t *txBatch) Exec() (pgconn.CommandTag, error) {
	if err := t.start(); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.BatchResults.Exec()
}

func (t *txBatch) Query() (pgx.Rows, error) {
	if err := t.start(); err != nil {
		return nil, err
	}
	return t.BatchResults.Query()
}

func (t *txBatch) QueryRow() pgx.Row {
	if err := t.start(); err != nil {
		return errRow{err}
	}
	return t.BatchResults.QueryRow()
}

func (t *txBatch) Close() error {
	if t.closed {
		return t.err
	}
	t.closed = true
	_ = t.start()
	err := t.BatchResults.Close()
	if t.err == nil {
		t.err = err
	}
	if pg := t.c.Conn.Conn().PgConn(); !pg.IsClosed() && pg.TxStatus() != 'I' {
		// The statement that failed ended the transaction's work and
		// released its locks; ROLLBACK ends the block itself. A failed
		// rollback closes the connection (the pool drops it on release).
		if _, rerr := pg.Exec(context.WithoutCancel(t.ctx), "ROLLBACK").ReadAll(); rerr != nil {
			_ = pg.Close(context.WithoutCancel(t.ctx))
		}
	}
	return t.err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// txRow ends the one-statement transaction when scanned.
type txRow struct {
	br  pgx.BatchResults
	row pgx.Row
}

func (r *txRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); cerr != nil && (err == nil || errors.Is(err, pgx.ErrNoRows)) {
		err = cerr
	}
	return err
}

// txRows ends the one-statement transaction after the last row, so Err
// reports a failed COMMIT too.
type txRows struct {
	pgx.Rows
	br   pgx.BatchResults
	done bool
	err  error
}

func (r *txRows) finish() {
	if !r.done {
		r.done = true
		r.Rows.Close()
		r.err = r.br.Close()
	}
}

func (r *txRows) Next() bool {
	if r.done {
		return false
	}
	if r.Rows.Next() {
		return true
	}
	r.finish()
	return false
}

func (r *txRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

func (r *txRows) Close() { r.finish() }
