package postgres

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// migrationFiles are the schema migrations, "NNNN_name.sql", applied in
// order. A released file is never edited; a change is the next number.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations parses the embedded files; versions must run 1, 2, 3 … without
// gaps, so two binaries never disagree about what a version number means.
func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, name, ok := strings.Cut(strings.TrimSuffix(e.Name(), ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %q is not NNNN_name.sql", e.Name())
		}
		body, err := fs.ReadFile(migrationFiles, path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration versions must be 1..n without gaps; found %d at position %d", m.version, i+1)
		}
	}
	return out, nil
}

// SchemaVersion is the newest schema this binary knows: Open migrates a
// database up to it and refuses a database that is already newer.
func SchemaVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// migrate brings the schema up to SchemaVersion in one transaction.
//
// Several replicas may start at once: each takes a transaction-scoped
// advisory lock keyed by the schema name first, so exactly one of them runs
// a given migration and the others, once the lock is theirs, find it
// recorded in schema_migrations and do nothing. PostgreSQL DDL is
// transactional, so a replica killed half-way leaves no half-applied
// migration behind: the lock and every change go away with its transaction.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	latest := ms[len(ms)-1].version

	ctx, cancel := context.WithTimeout(ctx, s.opts.MigrationTimeout)
	defer cancel()
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer pc.Release()
	conn := &txConn{Conn: pc, local: s.local}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	schema := pgx.Identifier{s.opts.Schema}.Sanitize()
	steps := []string{
		// The session's statement_timeout is sized for admissions; a
		// migration, and the wait for another replica's, gets its own bound.
		fmt.Sprintf("SET LOCAL statement_timeout = %d", s.opts.MigrationTimeout.Milliseconds()),
		fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", migrationLockKey(s.opts.Schema)),
		"CREATE SCHEMA IF NOT EXISTS " + schema,
		"SET LOCAL search_path TO " + schema,
		`CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`,
	}
	for _, q := range steps {
		if _, err := tx.Exec(ctx, q); err != nil {
			return err
		}
	}
	var current int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&current); err != nil {
		return err
	}
	if current > latest {
		return fmt.Errorf("schema %s is at version %d, this binary knows up to %d; upgrade the binary",
			s.opts.Schema, current, latest)
	}
	start := time.Now()
	for _, m := range ms[current:] {
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return fmt.Errorf("migration %d (%s): %w", m.version, m.name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			return err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if s.opts.Log != nil {
		// One transaction applied them all: one duration for the lot.
		for _, m := range ms[current:] {
			s.opts.Log.Info("ledger migration applied", "store", "postgres", "schema", s.opts.Schema,
				"from", m.version-1, "to", m.version, "name", m.name,
				"duration", time.Since(start).Round(time.Millisecond).String())
		}
	}
	return nil
}

// migrationLockKey is the advisory lock that serializes migrations of one
// schema; different schemas (tests, several ledgers in one database) never
// wait for each other.
func migrationLockKey(schema string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("itogate.ledger.migrate/" + schema))
	return int64(h.Sum64())
}

// poolerHint names the likely cause when Open failed on a pooler in
// transaction mode that the options do not declare: PgBouncer refuses the
// startup parameters a direct connection sends.
func poolerHint(o Options, err error) string {
	if o.Pooler != PoolerTransaction && strings.Contains(err.Error(), "unsupported startup parameter") {
		return " (a pooler in transaction mode refuses the session settings itogate sends; set ledger.pooler: transaction)"
	}
	return ""
}
