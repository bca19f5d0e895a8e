package runtime

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres"
)

// DefaultSweepInterval is how often the ledger sweeper runs when
// ledger.sweep_interval is unset ("0s" turns it off).
const DefaultSweepInterval = 10 * time.Minute

// sweepLeeway keeps a token this long past its exp before Sweep drops it:
// longer than any verification leeway (config.MaxLeeway), so a token still
// accepted at use is never swept from under an admission.
const sweepLeeway = 2 * config.MaxLeeway

// openLedger opens the configured store: the bbolt file at cfg.LedgerPath(),
// or PostgreSQL, migrated before it returns; unset keys take the store's own
// defaults. The description is safe to log: it never holds the DSN.
func openLedger(ctx context.Context, cfg config.Config, log *slog.Logger) (ledger.Store, string, error) {
	l := cfg.Ledger
	if l.Driver == config.DriverPostgres {
		s, err := postgres.Open(ctx, postgres.Options{
			DSN: l.DSN, Schema: l.Schema, MaxConns: l.MaxConns,
			ConnectTimeout: time.Duration(l.ConnectTimeout), StatementTimeout: time.Duration(l.StatementTimeout),
			AcquireTimeout: time.Duration(l.AcquireTimeout), MigrationTimeout: time.Duration(l.MigrationTimeout),
			Pooler: l.Pooler, Log: log,
		})
		if err != nil {
			return nil, "", err
		}
		schema := cmp.Or(l.Schema, postgres.DefaultSchema)
		desc := fmt.Sprintf("postgres (schema %s, version %d)", schema, postgres.SchemaVersion())
		if l.Pooler == config.PoolerTransaction {
			desc = fmt.Sprintf("postgres through a transaction pooler (schema %s, version %d)", schema, postgres.SchemaVersion())
		}
		return s, desc, nil
	}
	path := cfg.LedgerPath()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, "", fmt.Errorf("data directory: %w", err)
	}
	s, err := bolt.Open(path, bolt.Options{Log: log})
	if err != nil {
		return nil, "", err
	}
	return s, "bbolt " + path, nil
}

// ledgerSchema is the schema version of the open ledger: the bbolt file
// layout or the PostgreSQL migration it was brought to.
func (rt *Runtime) ledgerSchema() int {
	if rt.cfg.Ledger.Driver == config.DriverPostgres {
		return postgres.SchemaVersion()
	}
	return bolt.SchemaVersion()
}

// sweepInterval is ledger.sweep_interval, DefaultSweepInterval when unset,
// zero when turned off.
func sweepInterval(l config.Ledger) time.Duration {
	if l.SweepInterval == nil {
		return DefaultSweepInterval
	}
	return time.Duration(*l.SweepInterval)
}

// startSweeper drops expired confirmation tokens every interval (never their
// tombstones: a consumed confirmation stays consumed) until ctx ends.
// Replicas sharing a PostgreSQL ledger may all sweep; the store skips rows
// another holds.
func (rt *Runtime) startSweeper(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		return
	}
	rt.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			sctx, done := context.WithTimeout(ctx, interval)
			n, err := rt.store.Sweep(sctx, time.Now(), sweepLeeway)
			done()
			switch {
			case err != nil && ctx.Err() == nil:
				rt.log.Warn("ledger sweep failed", "swept", n, "err", err)
			case n > 0:
				rt.log.Info("ledger sweep", "swept", n)
			}
		}
	})
}

// backupStore is a ledger the running server can copy (bbolt: the server
// holds the file's lock, so only it can).
type backupStore interface {
	BackupFile(ctx context.Context, dir string, now time.Time) (string, int64, error)
}

// BackupLedger writes an online backup of a bbolt ledger to the backups
// directory beside the ledger file (<data_dir>/backups by default) as
// ledger-<UTC time>.db, while admissions go on, and logs "ledger backup
// written" (path, bytes) or "ledger backup failed". `itogate serve` calls
// it on SIGUSR1. A PostgreSQL ledger is backed up with the database's own
// tools: BackupLedger refuses it.
func (rt *Runtime) BackupLedger(ctx context.Context) (string, int64, error) {
	b, ok := rt.store.(backupStore)
	if !ok {
		err := fmt.Errorf("ledger backup: %s is backed up with PostgreSQL's own tools (pg_dump, base backups)", rt.ledgerDesc)
		rt.log.Error("ledger backup failed", "err", err)
		return "", 0, err
	}
	start := time.Now()
	dir := filepath.Join(filepath.Dir(rt.cfg.LedgerPath()), "backups")
	path, n, err := b.BackupFile(ctx, dir, start)
	if err != nil {
		rt.log.Error("ledger backup failed", "err", err)
		return "", 0, err
	}
	rt.log.Info("ledger backup written", "path", path, "bytes", n, "ledger_schema", rt.ledgerSchema(),
		"duration", time.Since(start).Round(time.Millisecond).String())
	return path, n, nil
}
