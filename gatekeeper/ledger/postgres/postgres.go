// Package postgres is the ledger.Store for several itogate replicas sharing
// one PostgreSQL database (docs/architecture.md §3), on pgx v5 and its connection pool.
//
// Layout (schema version 1, migrations/0001_init.sql), in one PostgreSQL
// schema (default "itogate"):
//
//	schema_migrations  version → name, applied_at
//	confirmations      ref → jti (unique), account, action, token (NULL once
//	                   swept), expires_at, deposited_at, state, consumed_by/at
//	admissions         (account, idempotency_key) → the admission record;
//	                   confirmation_ref unique; run_id unique for train.create
//
// Open runs the embedded migrations under an advisory lock, so replicas may
// start together. Commit is one statement — consume the confirmation (its
// row lock serializes racing commits, held only inside the server) and
// insert the admission — so it commits whole or not at all; the unique
// constraints back the invariants up should the Go code ever be wrong.
// Serialization failures and connections that broke before anything was
// sent are retried a bounded number of times.
//
// Behind a pooler in transaction mode (Options.Pooler, pooler.go) no named
// prepared statement is used and every operation is one explicit
// transaction that sets its own isolation level and timeouts.
//
// Every database fault is returned wrapped in ledger.ErrUnavailable; a
// cancelled or expired ctx returns its ctx.Err(); domain outcomes are the
// ledger errors. Connecting, each statement and each wait for a pooled
// connection are bounded (Options).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/itocompute/itogate/gatekeeper/api"
	"github.com/itocompute/itogate/gatekeeper/ledger"
)

// Defaults for zero Options fields.
const (
	DefaultSchema           = "itogate"
	DefaultMaxConns         = 16
	DefaultConnectTimeout   = 5 * time.Second
	DefaultStatementTimeout = 5 * time.Second
	DefaultAcquireTimeout   = 5 * time.Second
	DefaultMigrationTimeout = time.Minute
)

// commitAttempts bounds how often Commit runs its statement when it hits a
// serialization failure, a deadlock, a connection that failed before
// anything was sent, or a no-op nothing explains (see errUnexplained).
const commitAttempts = 5

// sweepChunk bounds how many tokens one Sweep statement drops, so a backlog
// never holds many row locks at once.
const sweepChunk = 512

// schemaPattern is what Options.Schema may be: a plain lower-case identifier,
// so it needs no quoting surprises in logs or psql.
var schemaPattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidSchema reports whether name may be used as Options.Schema.
func ValidSchema(name string) bool { return schemaPattern.MatchString(name) }

// Options configures Open. Zero durations and counts take the defaults;
// negative ones are an error.
type Options struct {
	// DSN is a libpq/pgx connection string or URL. Keep the password out of
	// it: pgx reads PGPASSWORD and ~/.pgpass (PGPASSFILE) like libpq.
	// pool_* parameters in it are overridden by the fields below.
	DSN string
	// Schema holds the ledger's tables; created if missing. Default
	// DefaultSchema.
	Schema string
	// MaxConns bounds this replica's connections (default 16). Size it so
	// that replicas × MaxConns stays below the server's max_connections.
	MaxConns int32
	// ConnectTimeout bounds establishing one connection (TCP, TLS, auth).
	ConnectTimeout time.Duration
	// StatementTimeout is the server-side statement_timeout of every
	// session (behind a transaction pooler: of every transaction), which
	// also bounds the wait for a row lock; an abandoned
	// transaction is ended by idle_in_transaction_session_timeout, set to
	// twice this. The client bounds each call too (one statement:
	// StatementTimeout + 1s; Commit's transaction: twice that), so a
	// network that stops delivering packets, which the server never
	// notices, cannot hang a call either.
	StatementTimeout time.Duration
	// AcquireTimeout bounds the wait for a pooled connection when all
	// MaxConns are busy.
	AcquireTimeout time.Duration
	// MigrationTimeout bounds Open's migration, including the wait for
	// another replica that is migrating.
	MigrationTimeout time.Duration
	// Pooler names what sits between the store and PostgreSQL: "" or
	// PoolerNone (nothing, or a pooler in session mode) or
	// PoolerTransaction (a pooler in transaction mode, e.g. PgBouncer's
	// pool_mode=transaction; see PoolerTransaction for what changes).
	Pooler string
	// Log receives one line per migration Open applied ("ledger migration
	// applied", after the migration transaction committed) and one when
	// Open finds a restore hold; nil logs nothing.
	Log *slog.Logger
	// Now is the clock the restore hold is compared with (HoldUntil);
	// nil: time.Now.
	Now func() time.Time
}

func (o *Options) setDefaults() error {
	if o.DSN == "" {
		return errors.New("ledger: postgres: dsn is required")
	}
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if !ValidSchema(o.Schema) {
		return fmt.Errorf("ledger: postgres: schema %q must match %s", o.Schema, schemaPattern)
	}
	if !ValidPooler(o.Pooler) {
		return fmt.Errorf("ledger: postgres: pooler %q must be %q or %q", o.Pooler, PoolerNone, PoolerTransaction)
	}
	if o.MaxConns < 0 || o.ConnectTimeout < 0 || o.StatementTimeout < 0 || o.AcquireTimeout < 0 || o.MigrationTimeout < 0 {
		return errors.New("ledger: postgres: negative pool size or timeout")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.MaxConns == 0 {
		o.MaxConns = DefaultMaxConns
	}
	def(&o.ConnectTimeout, DefaultConnectTimeout)
	def(&o.StatementTimeout, DefaultStatementTimeout)
	def(&o.AcquireTimeout, DefaultAcquireTimeout)
	def(&o.MigrationTimeout, DefaultMigrationTimeout)
	return nil
}

// Store is a ledger.Store backed by PostgreSQL. It is safe for concurrent
// use, and any number of Stores (replicas) may share one schema.
type Store struct {
	pool  *pgxpool.Pool
	opts  Options
	local string // localSettings when behind a transaction pooler
	q     queries
	wq    workloadQueries
	jq    jobQueries
	// runForShare reads a run's row FOR SHARE (runTx).
	runForShare string
	closed      atomic.Bool
	// holdUntil is the restore hold's end in Unix nanoseconds, 0 for
	// none (hold.go): read at Open and by every Ping.
	holdUntil atomic.Int64
}

func (s *Store) now() time.Time {
	if s.opts.Now != nil {
		return s.opts.Now()
	}
	return time.Now()
}

var (
	_ ledger.Store     = (*Store)(nil)
	_ ledger.Checker   = (*Store)(nil)
	_ ledger.Workloads = (*Store)(nil)
	_ ledger.Jobs      = (*Store)(nil)
)

// Open connects, migrates the schema to SchemaVersion and returns the store.
// Open fails with an error wrapping ledger.ErrUnavailable when the database
// cannot be reached, a migration fails or the schema is newer than this
// binary; a bad DSN or option is a plain error. The DSN never appears in an
// error.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(opts.DSN)
	if err != nil {
		// pgx redacts passwords on a best-effort basis only; say nothing.
		return nil, errors.New("ledger: postgres: the dsn does not parse as a PostgreSQL connection string")
	}
	cfg.MaxConns = opts.MaxConns
	if cfg.MinConns > cfg.MaxConns {
		cfg.MinConns = cfg.MaxConns
	}
	cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	rp := cfg.ConnConfig.RuntimeParams
	if rp["application_name"] == "" {
		rp["application_name"] = "itogate"
	}
	// When a call's ctx ends mid-statement, ask the server to cancel the
	// statement (then drop the connection if it does not answer within a
	// second). pgx's default only drops the connection, and the server
	// does not notice a dropped client while the statement waits for a
	// lock: a Commit the caller gave up on could otherwise still commit
	// once the lock frees.
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: networkSlack}
	}
	local := ""
	if opts.Pooler == PoolerTransaction {
		// A transaction pooler drops startup parameters (or refuses
		// them) and hands each transaction to any server connection, so
		// a named prepared statement of one may be missing, or another's,
		// on the next: no named statements, no session state, the
		// settings per transaction (txConn).
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		cfg.ConnConfig.StatementCacheCapacity = 0
		cfg.ConnConfig.DescriptionCacheCapacity = 0
		local = localSettings(opts)
	} else {
		rp["statement_timeout"] = strconv.FormatInt(opts.StatementTimeout.Milliseconds(), 10)
		rp["idle_in_transaction_session_timeout"] = strconv.FormatInt(2*opts.StatementTimeout.Milliseconds(), 10)
		// Commit relies on READ COMMITTED's re-check of a row it waited for;
		// pin it whatever the server's default.
		rp["default_transaction_isolation"] = "read committed"
		// For the same reason after a crash of this process: have the
		// server check every second whether the client is still there
		// during a long statement (PostgreSQL 14+; older servers ignore
		// it). And refuse a connection whose startup parameters did not
		// arrive: a transaction pooler configured to ignore them would
		// leave every statement unbounded on the server and fail on
		// named prepared statements.
		want := opts.StatementTimeout.Milliseconds()
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			var got int64
			if err := c.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'").Scan(&got); err != nil {
				return err
			}
			if got != want {
				return fmt.Errorf("the session's statement_timeout is %d ms, not the %d ms itogate sent: "+
					"a pooler in transaction mode drops startup parameters; set ledger.pooler: transaction", got, want)
			}
			_, err := c.Exec(ctx, "SET client_connection_check_interval = 1000")
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == codeUndefinedObject {
				return nil
			}
			return err
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ledger: postgres: open: %w: %w", ledger.ErrUnavailable, err)
	}
	schema := pgx.Identifier{opts.Schema}.Sanitize()
	s := &Store{pool: pool, opts: opts, local: local, q: newQueries(schema), wq: newWorkloadQueries(schema), jq: newJobQueries(schema), runForShare: runForShareQuery(schema)}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("ledger: postgres: migrate: %w", cerr)
		}
		return nil, fmt.Errorf("ledger: postgres: migrate: %w: %w%s", ledger.ErrUnavailable, err, poolerHint(opts, err))
	}
	if err := s.readHold(ctx, pool); err != nil {
		pool.Close()
		return nil, s.fault(ctx, "open: restore hold", err)
	}
	if h := s.HoldUntil(); !h.IsZero() && s.now().Before(h) && opts.Log != nil {
		opts.Log.Warn("ledger restored from a backup: deposits and admissions are held", "hold_until", h.Format(time.RFC3339))
	}
	return s, nil
}

// queries are the statements, qualified with the schema once at Open
// rather than relying on search_path.
type queries struct {
	deposit, confirmation, admission, run, commit, sweep, version string
	// The restore hold (hold.go).
	hold, holdAvailable, writeHold string
	// The run's life and revocations (life.go).
	lockBooking, confirmationForUpdate, revocations, bookingRuns, released, runRecord,
	endRun, releaseBooking, endBookingRuns, consume, insertAdmission, revoke, revoked, sweepRevocations string
	// The run's state (state.go).
	revokeRuns, halt, report, runEvents, booking, runs string
}

const (
	confirmationCols = `ref, jti, account, action, token, expires_at, deposited_at, state, consumed_by, consumed_at,
		booking_id, manifest_digest, run_id, cost_micro_usd`
	admissionCols = `account, idempotency_key, request_digest, decision_id, run_id, action, booking_id,
		manifest_digest, confirmation_ref, confirmation_jti, bundle_revision, state, created_at,
		entitlement_jti, caller_key_id, cost_micro_usd, gpus, booked_gpus, live_until, ticket,
		stage, from_stage, checkpoint_step`
	runCols = `run_id, account, booking_id, manifest_digest, gpus, booked_gpus, admitted_at, live_until, ended_at, ended_by, stage,
		entitlement_jti, restarts, last_checkpoint_step,
		halted_at, halt_decision_id, halt_stage, halt_report_digest, halt_failed_evals, halted_by,
		revoked_at, revocation_kind, revocation_subject, revoked_by, revocation_reason, revocation_decision_id,
		plan_interval_steps, plan_steps, plan_wall_clock_seconds, plan_lost_seconds,
		plan_checkpoint_gib, plan_storage_quota_gib,
		report_due, report_at, report_decision_id, report_stage, report_digest, report_by`
	revocationCols = `kind, subject, reason, revoked_by, revoked_at, expires_at, decision_id`
	eventCols      = `run_id, at, to_state, action, decision_id, actor, reason, stage, checkpoint_step, report_due, gpus`
	// notOverdue is ledger.RunRecord.Overdue negated, over a runs row at
	// the time $%d: no report deadline, before it, or a passing report for
	// the row's stage recorded before it.
	notOverdue = `(report_due IS NULL OR $%[1]d < report_due
		OR (report_at IS NOT NULL AND report_stage = stage AND report_at < report_due))`
)

func newQueries(schema string) queries {
	r := strings.NewReplacer("{s}", schema, "{ccols}", confirmationCols, "{acols}", admissionCols,
		"{rcols}", runCols, "{vcols}", revocationCols, "{ecols}", eventCols)
	return queries{
		deposit: r.Replace(`INSERT INTO {s}.confirmations (ref, jti, account, action, token, expires_at, deposited_at, state,
				booking_id, manifest_digest, run_id, cost_micro_usd)
			VALUES ($1, $2, $3, $4, $5, $6, $7, 'available', $8, $9, $10, $11)`),
		// The booking's lock and, for a create, its entitlement's ($2; the
		// booking's again otherwise): an entitlement revocation takes the
		// latter, so a create under it and the revocation serialize.
		lockBooking: `SELECT pg_advisory_xact_lock($1), pg_advisory_xact_lock($2)`,
		// See Commit. $1..$19 are the admission's columns in {acols} order,
		// $20/$21 the (kind, subject) pairs that must not be revoked, $22
		// the admission ticket, $23..$25 its stage, from_stage and
		// checkpoint_step, $26 the action's effect (api.Effect: what the
		// statement does is decided by the effect, never by an action's
		// name), $27 whether it moves the run's stage, $28 whether it
		// counts a restart, $29 the state it leaves its run in
		// (api.ActionSpec.RunState), $30..$33 a create's run plan
		// (ledger.RunPlan) and $34 a restart's budget, $35/$36 a create's
		// checkpoint GiB and its booking's checkpoint quota (0: none), $37
		// when the eval report of the stage a create or advance enters is
		// due (NULL: no deadline), $38 the world size of the stage an
		// advance enters (ledger.Admission.StageGPUs). A step needs its run
		// to pass ledger.CheckRunStep — live at $13, not revoked, not
		// halted, its stage's report not overdue, on the booking; one that moves the stage in stage $24
		// (it moves the run to $23); a restart from a step its plan writes
		// ($25), within its budget — the run's row is locked first (FOR
		// UPDATE), so a revocation or halt racing it is seen, re-checked,
		// or waits. An advance into a stage larger than its run
		// (ledger.Grows) needs the booking's other live runs plus $38
		// within the run's booked GPUs (ledger.CheckGrow), under the
		// booking's lock like a create's capacity, and grows the run's
		// gpus to $38. Every run the admission acts on gets its event (with
		// the GPUs a create admitted or a grow set); the booking's first
		// admission binds it to its account.
		commit: r.Replace(`WITH run AS (
				SELECT run_id, account, booking_id, stage, live_until, ended_at, halted_at, revoked_at, restarts,
					plan_interval_steps, plan_steps, report_due, report_at, report_stage, gpus, booked_gpus
				FROM {s}.runs WHERE run_id = $5 AND $26 IN ('step_run', 'end_run')
				FOR UPDATE),
			booking AS (SELECT account, released_at FROM {s}.bookings WHERE booking_id = $7),
			consumed AS (
				UPDATE {s}.confirmations c SET state = 'consumed', consumed_by = $2, consumed_at = $13
				WHERE c.ref = $9 AND c.state = 'available' AND c.account = $1 AND c.action = $6 AND c.jti = $10
					AND c.booking_id = $7
					AND ($26 <> 'create_run' OR c.manifest_digest = $8)
					AND ($26 NOT IN ('step_run', 'end_run') OR c.run_id = $5)
					AND c.cost_micro_usd >= $16
					AND NOT EXISTS (SELECT 1 FROM {s}.admissions WHERE account = $1 AND idempotency_key = $2)
					AND NOT EXISTS (SELECT 1 FROM booking WHERE account <> $1)
					AND NOT EXISTS (SELECT 1 FROM {s}.revocations r
						JOIN unnest($20::text[], $21::text[]) AS x(kind, subject)
						ON r.kind = x.kind AND r.subject = x.subject)
					AND ($26 <> 'create_run' OR (
						NOT EXISTS (SELECT 1 FROM booking WHERE released_at IS NOT NULL)
						AND (SELECT coalesce(sum(gpus), 0) FROM {s}.runs
							WHERE booking_id = $7 AND ended_at IS NULL AND live_until > $13)
						+ (SELECT coalesce(sum(gpus), 0) FROM {s}.runs
							WHERE booking_id = $7 AND ended_at > $13 AND live_until > $13) + $17 <= $18
						AND ($36::bigint = 0 OR (SELECT coalesce(sum(plan_checkpoint_gib), 0) FROM {s}.runs
							WHERE booking_id = $7 AND (ended_at IS NULL OR ended_at > $13) AND live_until > $13)
							+ $35::bigint <= $36::bigint)))
					AND ($26 <> 'end_run' OR NOT EXISTS (
						SELECT 1 FROM run WHERE account <> $1 OR booking_id <> $7))
					AND ($26 <> 'step_run' OR EXISTS (
						SELECT 1 FROM run WHERE account = $1 AND booking_id = $7
							AND live_until > $13 AND (ended_at IS NULL OR ended_at > $13)
							AND revoked_at IS NULL AND halted_at IS NULL AND ` + fmt.Sprintf(notOverdue, 13) + `
							AND (NOT $27 OR stage = $24)
							AND (NOT $28 OR plan_interval_steps = 0
								OR ($25::bigint > 0 AND $25::bigint <= plan_steps AND $25::bigint % plan_interval_steps = 0))
							AND (NOT $28 OR $34::integer = 0 OR restarts < $34::integer)))
					AND ($26 <> 'step_run' OR NOT $27 OR NOT EXISTS (SELECT 1 FROM run WHERE gpus < $38::integer)
						OR EXISTS (SELECT 1 FROM run WHERE
							(SELECT coalesce(sum(gpus), 0) FROM {s}.runs
								WHERE booking_id = $7 AND run_id <> $5 AND ended_at IS NULL AND live_until > $13)
							+ (SELECT coalesce(sum(gpus), 0) FROM {s}.runs
								WHERE booking_id = $7 AND run_id <> $5 AND ended_at > $13 AND live_until > $13)
							+ $38::integer <= booked_gpus))
				RETURNING c.ref),
			created AS (
				INSERT INTO {s}.runs (run_id, account, booking_id, manifest_digest, gpus, booked_gpus, admitted_at,
					live_until, stage, entitlement_jti,
					plan_interval_steps, plan_steps, plan_wall_clock_seconds, plan_lost_seconds,
					plan_checkpoint_gib, plan_storage_quota_gib, report_due)
				SELECT $5, $1, $7, $8, $17, $18, $13, $19, $23, $14, $30, $31, $32, $33, $35, $36, $37::timestamptz
				FROM consumed WHERE $26 = 'create_run'),
			stepped AS (
				UPDATE {s}.runs SET stage = CASE WHEN $27 THEN $23 ELSE stage END,
					gpus = CASE WHEN $27 AND $38::integer > gpus THEN $38::integer ELSE gpus END,
					report_due = CASE WHEN $27 THEN $37::timestamptz ELSE report_due END,
					report_at = CASE WHEN $27 THEN NULL ELSE report_at END,
					report_decision_id = CASE WHEN $27 THEN '' ELSE report_decision_id END,
					report_stage = CASE WHEN $27 THEN '' ELSE report_stage END,
					report_digest = CASE WHEN $27 THEN '' ELSE report_digest END,
					report_by = CASE WHEN $27 THEN '' ELSE report_by END,
					restarts = restarts + CASE WHEN $28 THEN 1 ELSE 0 END,
					last_checkpoint_step = CASE WHEN $28 THEN $25 ELSE last_checkpoint_step END
				WHERE run_id = $5 AND $26 = 'step_run' AND EXISTS (SELECT 1 FROM consumed)),
			ended AS (
				UPDATE {s}.runs SET ended_at = $13, ended_by = $6
				WHERE EXISTS (SELECT 1 FROM consumed) AND ended_at IS NULL AND live_until > $13
					AND ((run_id = $5 AND $26 = 'end_run')
						OR (booking_id = $7 AND $26 = 'release_booking'))
				RETURNING run_id),
			bound AS (
				INSERT INTO {s}.bookings AS b (booking_id, account, bound_at, released_at, released_by)
				SELECT $7, $1, $13, CASE WHEN $26 = 'release_booking' THEN $13 END,
					CASE WHEN $26 = 'release_booking' THEN $2 END
				FROM consumed
				ON CONFLICT (booking_id) DO UPDATE SET released_at = EXCLUDED.released_at, released_by = EXCLUDED.released_by
				WHERE EXCLUDED.released_at IS NOT NULL AND b.released_at IS NULL),
			events AS (
				INSERT INTO {s}.run_events ({ecols})
				SELECT $5, $13, CASE WHEN $26 <> 'end_run' OR EXISTS (SELECT 1 FROM ended) THEN $29 ELSE '' END,
					$6, $4, $1, '', $23, $25, $37::timestamptz,
					CASE WHEN $26 = 'create_run' THEN $17
						WHEN $26 = 'step_run' AND $27 AND $38::integer > (SELECT gpus FROM run) THEN $38::integer
						ELSE 0 END
				FROM consumed
				WHERE $26 = 'create_run' OR ($26 IN ('step_run', 'end_run') AND EXISTS (SELECT 1 FROM run))
				UNION ALL
				SELECT e.run_id, $13, $29, $6, $4, $1, '', $23, $25, NULL, 0 FROM ended e WHERE $26 = 'release_booking')
			INSERT INTO {s}.admissions ({acols})
			SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $22, $23, $24, $25
			FROM consumed`),
		confirmationForUpdate: r.Replace(`SELECT {ccols} FROM {s}.confirmations WHERE ref = $1 FOR UPDATE`),
		revocations:           r.Replace(`SELECT {vcols} FROM {s}.revocations WHERE kind = ANY($1) AND subject = ANY($2)`),
		// The runs live at $2, in two halves that each use an index
		// (migration 0005): not ended, and ended after $2.
		bookingRuns: r.Replace(`SELECT {rcols} FROM {s}.runs
				WHERE booking_id = $1 AND ended_at IS NULL AND live_until > $2
			UNION ALL
			SELECT {rcols} FROM {s}.runs
				WHERE booking_id = $1 AND ended_at > $2 AND live_until > $2
			ORDER BY admitted_at, run_id`),
		released:  r.Replace(`SELECT released_at FROM {s}.bookings WHERE booking_id = $1`),
		booking:   r.Replace(`SELECT account, released_at FROM {s}.bookings WHERE booking_id = $1`),
		runRecord: r.Replace(`SELECT {rcols} FROM {s}.runs WHERE run_id = $1`),
		// Revoke's second statement, after the revocation's insert in the
		// same transaction: $1/$2 its kind and subject, $3 the time it is
		// applied at. Each run of the booking ($1 booking) or admitted
		// under the entitlement ($1 entitlement) live at $3 and not revoked
		// yet is revoked with the stored revocation, and gets its event
		// (ledger.RevocationEvent).
		revokeRuns: r.Replace(`WITH stored AS (
				SELECT kind, subject, reason, revoked_by, decision_id FROM {s}.revocations WHERE kind = $1 AND subject = $2),
			revoked AS (
				UPDATE {s}.runs u SET revoked_at = $3, revocation_kind = s.kind, revocation_subject = s.subject,
					revoked_by = s.revoked_by, revocation_reason = s.reason, revocation_decision_id = s.decision_id
				FROM stored s
				WHERE ((s.kind = 'booking' AND u.booking_id = s.subject)
						OR (s.kind = 'entitlement' AND u.entitlement_jti = s.subject))
					AND u.revoked_at IS NULL AND u.live_until > $3 AND (u.ended_at IS NULL OR u.ended_at > $3)
				RETURNING u.run_id, s.kind, s.subject, s.reason, s.revoked_by, s.decision_id)
			INSERT INTO {s}.run_events ({ecols})
			SELECT run_id, $3, 'revoked', '', decision_id, revoked_by,
				kind || ' ' || subject || ' revoked' || CASE WHEN reason <> '' THEN ': ' || reason ELSE '' END, '', 0, NULL, 0
			FROM revoked`),
		// HaltRun, under the booking's lock: $1 the run, $2 the halt's time,
		// $3..$7 its decision id, stage, report digest, failed evals and
		// author, $8/$9 the run's account and booking, $10 the event's
		// reason. Only a run that passes ledger.CheckHalt is halted.
		halt: r.Replace(`WITH halted AS (
				UPDATE {s}.runs SET halted_at = $2, halt_decision_id = $3, halt_stage = $4, halt_report_digest = $5,
					halt_failed_evals = $6, halted_by = $7
				WHERE run_id = $1 AND account = $8 AND booking_id = $9 AND stage = $4
					AND halted_at IS NULL AND revoked_at IS NULL AND ` + fmt.Sprintf(notOverdue, 2) + `
					AND live_until > $2 AND (ended_at IS NULL OR ended_at > $2)
				RETURNING run_id)
			INSERT INTO {s}.run_events ({ecols})
			SELECT run_id, $2, 'halted', '', $3, $7, $10, $4, 0, NULL, 0 FROM halted`),
		// RecordReport, under the booking's lock: $1 the run, $2 the
		// report's time, $3..$6 its decision id, stage, report digest and
		// author, $7/$8 the run's account and booking, $9 the event's
		// reason. Only a run that passes ledger.CheckRecordReport records
		// it; one with a report for the stage keeps the first.
		report: r.Replace(`WITH reported AS (
				UPDATE {s}.runs SET report_at = $2, report_decision_id = $3, report_stage = $4, report_digest = $5,
					report_by = $6
				WHERE run_id = $1 AND account = $7 AND booking_id = $8 AND stage = $4
					AND NOT (report_at IS NOT NULL AND report_stage = $4)
					AND halted_at IS NULL AND revoked_at IS NULL AND ` + fmt.Sprintf(notOverdue, 2) + `
					AND live_until > $2 AND (ended_at IS NULL OR ended_at > $2)
				RETURNING run_id)
			INSERT INTO {s}.run_events ({ecols})
			SELECT run_id, $2, 'live', '', $3, $6, $9, $4, 0, NULL, 0 FROM reported`),
		runEvents: r.Replace(`SELECT {ecols} FROM {s}.run_events WHERE run_id = $1 ORDER BY id LIMIT $2`),
		// An account's runs after $3 (on booking $2 when not ''), through
		// runs_account_idx (migration 0008); one more than the page ($4),
		// to tell whether more are left.
		runs: r.Replace(`SELECT {rcols} FROM {s}.runs
			WHERE account = $1 AND ($2 = '' OR booking_id = $2) AND run_id COLLATE "C" > $3
			ORDER BY run_id COLLATE "C" LIMIT $4`),
		endRun: r.Replace(`UPDATE {s}.runs SET ended_at = $2, ended_by = $3
			WHERE run_id = $1 AND ended_at IS NULL AND live_until > $2`),
		releaseBooking: r.Replace(`INSERT INTO {s}.bookings (booking_id, released_at, released_by) VALUES ($1, $2, $3)
			ON CONFLICT (booking_id) DO NOTHING`),
		endBookingRuns: r.Replace(`UPDATE {s}.runs SET ended_at = $2, ended_by = $3
			WHERE booking_id = $1 AND ended_at IS NULL AND live_until > $2`),
		consume: r.Replace(`UPDATE {s}.confirmations SET state = 'consumed', consumed_by = $2, consumed_at = $3
			WHERE ref = $1 AND state = 'available'`),
		insertAdmission: r.Replace(`INSERT INTO {s}.admissions ({acols})
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23)`),
		revoke: r.Replace(`INSERT INTO {s}.revocations ({vcols}) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT (kind, subject) DO NOTHING`),
		revoked:          r.Replace(`SELECT {vcols} FROM {s}.revocations WHERE kind = $1 AND subject = $2`),
		sweepRevocations: r.Replace(`DELETE FROM {s}.revocations WHERE expires_at < $1`),
		confirmation:     r.Replace(`SELECT {ccols} FROM {s}.confirmations WHERE ref = $1`),
		admission:        r.Replace(`SELECT {acols} FROM {s}.admissions WHERE account = $1 AND idempotency_key = $2`),
		run:              r.Replace(`SELECT {acols} FROM {s}.admissions WHERE run_id = $1 AND state = 'admitted'`),
		sweep: r.Replace(`WITH due AS (
				SELECT ref FROM {s}.confirmations
				WHERE token IS NOT NULL AND expires_at < $1
				ORDER BY expires_at LIMIT $2
				FOR UPDATE SKIP LOCKED)
			UPDATE {s}.confirmations c
			SET token = NULL, state = CASE WHEN c.state = 'available' THEN 'expired' ELSE c.state END
			FROM due WHERE c.ref = due.ref`),
		version: r.Replace(`SELECT coalesce(max(version), 0) FROM {s}.schema_migrations`),
		hold:    r.Replace(`SELECT hold_until FROM {s}.restore_hold`),
		holdAvailable: r.Replace(`SELECT count(*), max(expires_at) FROM {s}.confirmations
			WHERE state = 'available'`),
		writeHold: r.Replace(`INSERT INTO {s}.restore_hold (id, hold_until, restored_at, restored_from)
			VALUES (true, $1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET hold_until = EXCLUDED.hold_until, restored_at = EXCLUDED.restored_at,
				restored_from = EXCLUDED.restored_from`),
	}
}

// DepositConfirmation implements ledger.Store.
func (s *Store) DepositConfirmation(ctx context.Context, c ledger.Confirmation) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if err := s.held("deposit"); err != nil {
		return err
	}
	conn, err := s.acquire(ctx, "deposit")
	if err != nil {
		return err
	}
	defer conn.Release()
	qctx, cancel := s.bound(ctx, 1)
	defer cancel()
	_, err = conn.Exec(qctx, s.q.deposit, c.Ref, c.JTI, c.Account, c.Action, c.Token, c.ExpiresAt.UTC(), c.DepositedAt.UTC(),
		c.BookingID, c.ManifestDigest, c.RunID, c.CostMicroUSD)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == codeUniqueViolation {
		return fmt.Errorf("ledger: deposit: %s: %w", pgErr.ConstraintName, ledger.ErrConfirmationDuplicate)
	}
	if err != nil {
		return s.fault(ctx, "deposit", err)
	}
	return nil
}

// Confirmation implements ledger.Store.
func (s *Store) Confirmation(ctx context.Context, ref string) (ledger.Confirmation, error) {
	var c ledger.Confirmation
	err := s.read(ctx, "confirmation", func(qctx context.Context, conn *txConn) (err error) {
		c, err = scanConfirmation(conn.QueryRow(qctx, s.q.confirmation, ref))
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ledger.Confirmation{}, fmt.Errorf("ledger: confirmation: %w", ledger.ErrNotFound)
	case err != nil:
		return ledger.Confirmation{}, err
	}
	return c, nil
}

// Admission implements ledger.Store.
func (s *Store) Admission(ctx context.Context, account, key string) (ledger.Admission, error) {
	return s.readAdmission(ctx, "admission", s.q.admission, account, key)
}

// Run implements ledger.Store.
func (s *Store) Run(ctx context.Context, runID string) (ledger.Admission, error) {
	return s.readAdmission(ctx, "run", s.q.run, runID)
}

func (s *Store) readAdmission(ctx context.Context, op, query string, args ...any) (ledger.Admission, error) {
	var a ledger.Admission
	err := s.read(ctx, op, func(qctx context.Context, conn *txConn) (err error) {
		a, err = scanAdmission(conn.QueryRow(qctx, query, args...))
		return err
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ledger.Admission{}, fmt.Errorf("ledger: %s: %w", op, ledger.ErrNotFound)
	case err != nil:
		return ledger.Admission{}, err
	}
	return a, nil
}

// read runs one read-only statement; pgx.ErrNoRows comes back as is, any
// other failure as s.fault. A read that failed because its connection was
// dead (see deadConnection) runs once more after the pool is reset: reads
// change nothing, and after a failover or terminated backends the pool
// still holds connections that only a query reveals as dead, each of which
// would otherwise fail one request.
func (s *Store) read(ctx context.Context, op string, query func(context.Context, *txConn) error) error {
	// One statement's time bounds both attempts.
	qctx, cancel := s.bound(ctx, 1)
	defer cancel()
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		var conn *txConn
		if conn, err = s.acquire(ctx, op); err != nil {
			return err
		}
		err = query(qctx, conn)
		conn.Release()
		if err == nil || errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if attempt > 0 || !deadConnection(ctx, err) {
			break
		}
		// Its siblings were most likely cut by the same event: close the
		// idle ones now, the busy ones when released.
		s.pool.Reset()
	}
	return s.fault(ctx, op, err)
}

// deadConnection reports whether err is the connection failing under a
// statement — the server ended the session (SQLSTATE class 57P: operator
// intervention, e.g. pg_terminate_backend, shutdown), a connection
// exception (class 08), or the socket failing (EOF, reset, a network error)
// — rather than the database answering a query error, a scan failing or a
// deadline passing.
func deadConnection(ctx context.Context, err error) bool {
	if ctx.Err() != nil || pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "57P") || strings.HasPrefix(pgErr.Code, "08")
	}
	var netErr net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// Commit implements ledger.Store.
//
// The write is ONE round trip (commitOnce, life.go): a pipelined batch of
// two statements in one implicit transaction —
//
//  1. a transaction-scoped advisory lock on the booking, so commits on one
//     booking, from any replica, run one after another; the lock is held
//     inside the server only, never across a round trip to this process;
//  2. one statement, whose READ COMMITTED snapshot is taken after the lock:
//     an UPDATE that consumes the confirmation only if it is available,
//     its bindings match (ledger.CheckBindings), nothing it rests on is
//     revoked, the key is unused and, for train.create, the booking's live
//     runs leave room (ledger.CheckCapacity) and it is not released —
//     feeding the INSERT of the admission and, in the same statement, the
//     new run, the ended run, or the released booking and its ended runs.
//
// PostgreSQL applies a statement entirely or not at all. Racing commits for
// one confirmation wait on its row lock and re-check the row; racing
// creates on one booking wait on the booking's lock and then see what the
// other committed. The INSERT has no ON CONFLICT clause: a concurrent
// admission under the same key is a unique violation that rolls the whole
// statement back.
//
// Before the batch, two lock-free reads (one round trip) answer what is
// already final — a stored key, an unknown, mismatched, consumed or expired
// confirmation — so losers of a race mostly never queue for the lock. When
// the statement wrote nothing, lock-free reads say why, in the documented
// order; capacity is derived again from fresh reads, and when nothing
// explains the no-op (GPUs were freed meanwhile) the commit runs again.
//
// A ctx that ends before the batch is sent returns ctx.Err() with nothing
// written; one that ends (or a connection that breaks) while it runs leaves
// the outcome unknown, and the error wraps ledger.ErrUnavailable.
func (s *Store) Commit(ctx context.Context, a ledger.Admission) (ledger.Admission, bool, error) {
	if err := a.Validate(); err != nil {
		return ledger.Admission{}, false, err
	}
	if err := s.held("commit"); err != nil {
		return ledger.Admission{}, false, err
	}
	plan, budget, due := a.Plan, a.RestartBudget, a.ReportDue // commit inputs, not stored with the admission
	a = normalizeAdmission(a)
	a.Plan, a.RestartBudget, a.ReportDue = plan, budget, due
	for attempt := 1; ; attempt++ {
		stored, replayed, err := s.commitOnce(ctx, a)
		if err == nil {
			return stored, replayed, nil
		}
		var r *retryable
		if !errors.As(err, &r) {
			return ledger.Admission{}, false, err
		}
		if attempt == commitAttempts {
			return ledger.Admission{}, false, s.fault(ctx, "commit",
				fmt.Errorf("gave up after %d attempts: %w", attempt, r.err))
		}
		// 1, 2, 4, 8 ms with jitter: enough for the competing transaction
		// to finish, short against the request deadline.
		d := time.Duration(1<<(attempt-1))*time.Millisecond + rand.N(time.Millisecond)
		select {
		case <-ctx.Done():
			return ledger.Admission{}, false, fmt.Errorf("ledger: commit: %w", ctx.Err())
		case <-time.After(d):
		}
	}
}

// retryable marks a commit attempt that wrote nothing and may run again.
type retryable struct{ err error }

func (e *retryable) Error() string { return "retryable: " + e.err.Error() }
func (e *retryable) Unwrap() error { return e.err }

// errUnexplained: the statement wrote nothing, yet the reads after it show
// an unused key and an available, matching confirmation. States only move
// forward, so this cannot last; the next attempt decides.
var errUnexplained = errors.New("commit matched nothing but nothing explains why")

// SQLSTATEs the store acts on.
const (
	codeUniqueViolation      = "23505"
	codeUndefinedObject      = "42704"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
)

func retryCode(code string) bool {
	return code == codeSerializationFailure || code == codeDeadlockDetected
}

// Sweep implements ledger.Store. Each statement drops at most sweepChunk
// tokens and skips rows a Commit holds locked (the next Sweep gets them),
// so replicas may sweep at the same time.
func (s *Store) Sweep(ctx context.Context, now time.Time, leeway time.Duration) (int, error) {
	if leeway < 0 {
		return 0, fmt.Errorf("ledger: sweep: negative leeway %v: %w", leeway, ledger.ErrInvalid)
	}
	cutoff := now.Add(-leeway).UTC()
	if err := s.sweepRevocations(ctx, cutoff); err != nil {
		return 0, err
	}
	total := 0
	for {
		n, err := s.sweepChunk(ctx, cutoff)
		total += n
		if err != nil || n < sweepChunk {
			return total, err
		}
	}
}

func (s *Store) sweepRevocations(ctx context.Context, cutoff time.Time) error {
	conn, err := s.acquire(ctx, "sweep")
	if err != nil {
		return err
	}
	defer conn.Release()
	qctx, cancel := s.bound(ctx, 1)
	defer cancel()
	if _, err := conn.Exec(qctx, s.q.sweepRevocations, cutoff); err != nil {
		return s.fault(ctx, "sweep", err)
	}
	return nil
}

func (s *Store) sweepChunk(ctx context.Context, cutoff time.Time) (int, error) {
	conn, err := s.acquire(ctx, "sweep")
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	qctx, cancel := s.bound(ctx, 1)
	defer cancel()
	tag, err := conn.Exec(qctx, s.q.sweep, cutoff, sweepChunk)
	if err != nil {
		return 0, s.fault(ctx, "sweep", err)
	}
	return int(tag.RowsAffected()), nil
}

// Ping implements ledger.Store: the database answers and its schema is the
// version this binary migrated to. A replica that finds the schema moved on
// (a newer replica migrated it) reports unready rather than serve a layout
// it does not know.
func (s *Store) Ping(ctx context.Context) error {
	conn, err := s.acquire(ctx, "ping")
	if err != nil {
		return err
	}
	defer conn.Release()
	qctx, cancel := s.bound(ctx, 1)
	defer cancel()
	var v int
	if err := conn.QueryRow(qctx, s.q.version).Scan(&v); err != nil {
		return s.fault(ctx, "ping", err)
	}
	if want := SchemaVersion(); v != want {
		return s.fault(ctx, "ping", fmt.Errorf("schema version %d, this binary serves %d", v, want))
	}
	// A hold written after Open (another process restored the ledger)
	// reaches this replica here.
	if err := s.readHold(qctx, conn); err != nil {
		return s.fault(ctx, "ping", err)
	}
	return s.held("ping")
}

// Close implements ledger.Store. It waits for operations in flight, each
// bounded by the statement timeout.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.pool.Close()
	return nil
}

var errClosed = errors.New("store closed")

// acquire checks ctx and the store, then waits at most AcquireTimeout for a
// pooled connection.
func (s *Store) acquire(ctx context.Context, op string) (*txConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ledger: %s: %w", op, err)
	}
	if s.closed.Load() {
		return nil, fmt.Errorf("ledger: postgres: %s: %w: %w", op, ledger.ErrUnavailable, errClosed)
	}
	actx, cancel := context.WithTimeout(ctx, s.opts.AcquireTimeout)
	defer cancel()
	c, err := s.pool.Acquire(actx)
	if err != nil {
		return nil, s.fault(ctx, op, err)
	}
	return &txConn{Conn: c, local: s.local}, nil
}

// networkSlack is what the client allows beyond the server-side statement
// timeout before it gives up on a connection itself.
const networkSlack = time.Second

// bound returns ctx limited to n statements' worth of time: the server's
// statement_timeout plus networkSlack, n times.
func (s *Store) bound(ctx context.Context, n int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Duration(n)*(s.opts.StatementTimeout+networkSlack))
}

// fault wraps a database error in ledger.ErrUnavailable, or returns the ctx
// error when the caller's ctx ended (which is what made the call fail).
func (s *Store) fault(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("ledger: %s: %w", op, cerr)
	}
	return fmt.Errorf("ledger: postgres: %s: %w: %w", op, ledger.ErrUnavailable, err)
}

func scanConfirmation(row pgx.Row) (ledger.Confirmation, error) {
	var (
		c          ledger.Confirmation
		state      string
		consumedBy *string
		consumedAt *time.Time
	)
	err := row.Scan(&c.Ref, &c.JTI, &c.Account, &c.Action, &c.Token, &c.ExpiresAt, &c.DepositedAt,
		&state, &consumedBy, &consumedAt, &c.BookingID, &c.ManifestDigest, &c.RunID, &c.CostMicroUSD)
	if err != nil {
		return ledger.Confirmation{}, err
	}
	c.State = ledger.ConfirmationState(state)
	c.ExpiresAt, c.DepositedAt = c.ExpiresAt.UTC(), c.DepositedAt.UTC()
	if consumedBy != nil {
		c.ConsumedBy = *consumedBy
	}
	if consumedAt != nil {
		c.ConsumedAt = consumedAt.UTC()
	}
	if len(c.Token) == 0 {
		c.Token = nil
	}
	return c, nil
}

func scanAdmission(row pgx.Row) (ledger.Admission, error) {
	var (
		a         ledger.Admission
		state     string
		liveUntil *time.Time
	)
	err := row.Scan(&a.Account, &a.IdempotencyKey, &a.RequestDigest, &a.DecisionID, &a.RunID, &a.Action,
		&a.BookingID, &a.ManifestDigest, &a.ConfirmationRef, &a.ConfirmationJTI, &a.BundleRevision, &state, &a.CreatedAt,
		&a.EntitlementJTI, &a.CallerKeyID, &a.CostMicroUSD, &a.GPUs, &a.BookedGPUs, &liveUntil, &a.Ticket,
		&a.Stage, &a.FromStage, &a.CheckpointStep)
	if err != nil {
		return ledger.Admission{}, err
	}
	a.State = api.AdmissionState(state)
	a.CreatedAt = a.CreatedAt.UTC()
	if liveUntil != nil {
		a.LiveUntil = liveUntil.UTC()
	}
	return a, nil
}

// normalizeAdmission returns a as it will read back — timestamptz keeps
// microseconds — so a fresh Commit and a replay hand the caller identical
// values.
func normalizeAdmission(a ledger.Admission) ledger.Admission {
	a.CreatedAt = a.CreatedAt.UTC().Truncate(time.Microsecond)
	if !a.LiveUntil.IsZero() {
		a.LiveUntil = a.LiveUntil.UTC().Truncate(time.Microsecond)
	}
	return a
}

// Check implements ledger.Checker. The schema's constraints already refuse
// most broken states (one admission per confirmation, state/consumed_by
// agreement, foreign keys); Check verifies what spans tables: every
// consumed confirmation has the admission that consumed it and every
// admission's confirmation is consumed by it, for its account, action and
// jti; the charges of every workload binding (ledger.CheckCharges). It reads in one REPEATABLE READ transaction, so it sees one snapshot
// while replicas keep committing.
func (s *Store) Check(ctx context.Context) (ledger.CheckReport, error) {
	var rep ledger.CheckReport
	conn, err := s.acquire(ctx, "check")
	if err != nil {
		return rep, err
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return rep, s.fault(ctx, "check", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	r := strings.NewReplacer("{s}", pgx.Identifier{s.opts.Schema}.Sanitize())
	err = tx.QueryRow(ctx, r.Replace(`SELECT count(*),
			count(*) FILTER (WHERE state = 'available'),
			count(*) FILTER (WHERE state = 'consumed'),
			count(*) FILTER (WHERE state = 'expired'),
			count(*) FILTER (WHERE token IS NULL)
		FROM {s}.confirmations`)).Scan(&rep.Confirmations, &rep.Available, &rep.Consumed, &rep.Expired, &rep.Swept)
	if err == nil {
		err = tx.QueryRow(ctx, r.Replace(`SELECT count(*), count(*) FILTER (WHERE state = 'admitted') FROM {s}.admissions`)).
			Scan(&rep.Admissions, &rep.Runs)
	}
	if err != nil {
		return rep, s.fault(ctx, "check", err)
	}
	rows, err := tx.Query(ctx, r.Replace(`
		SELECT 'confirmation ' || c.ref || ' consumed by ' || c.consumed_by || ' without an admission'
		FROM {s}.confirmations c
		WHERE c.state = 'consumed' AND NOT EXISTS (
			SELECT 1 FROM {s}.admissions a
			WHERE a.confirmation_ref = c.ref AND a.account = c.account AND a.idempotency_key = c.consumed_by)
		UNION ALL
		SELECT 'admission (' || a.account || ', ' || a.idempotency_key || '): confirmation ' || c.ref ||
			' is ' || c.state || ' by ' || coalesce(c.consumed_by, '-') || ' or belongs to another account, action or jti'
		FROM {s}.admissions a JOIN {s}.confirmations c ON c.ref = a.confirmation_ref
		WHERE c.state <> 'consumed' OR c.consumed_by <> a.idempotency_key OR c.account <> a.account
			OR c.action <> a.action OR c.jti <> a.confirmation_jti
		UNION ALL
		SELECT 'confirmation ' || ref || ': available without a token'
		FROM {s}.confirmations WHERE state = 'available' AND token IS NULL
		UNION ALL
		-- ledger.CheckCharges, in SQL.
		(SELECT 'run ' || c.run_id || ': the children of ' || c.owner_uid || ' are charged ' || sum(c.gpus) ||
			' GPUs, the run holds ' || r.gpus
		FROM {s}.workload_charges c JOIN {s}.runs r ON r.run_id = c.run_id
		GROUP BY c.run_id, c.owner_uid, r.gpus HAVING sum(c.gpus) > r.gpus)
		UNION ALL
		SELECT 'run ' || c.run_id || ': charge ' || c.name || ' of uid ' || c.uid || ' under ' || c.owner_uid ||
			' is not of the binding''s uids'
		FROM {s}.workload_charges c
		WHERE NOT EXISTS (SELECT 1 FROM {s}.workload_uids u WHERE u.run_id = c.run_id AND u.uid = c.uid)
			OR NOT EXISTS (SELECT 1 FROM {s}.workload_uids u WHERE u.run_id = c.run_id AND u.uid = c.owner_uid)
		LIMIT 20`))
	if err != nil {
		return rep, s.fault(ctx, "check", err)
	}
	problems, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return rep, s.fault(ctx, "check", err)
	}
	more, err := s.checkRunLife(ctx, tx, r)
	if err != nil {
		return rep, s.fault(ctx, "check", err)
	}
	problems = append(problems, more...)
	if more, err = s.checkRunEvents(ctx, tx, r); err != nil {
		return rep, s.fault(ctx, "check", err)
	}
	problems = append(problems, more...)
	if len(problems) > 0 {
		return rep, fmt.Errorf("ledger: check: %w: %s", ledger.ErrInconsistent, strings.Join(problems, "; "))
	}
	return rep, nil
}
