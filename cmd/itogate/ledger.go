package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres"
)

// sweepLeeway keeps a token this long past its exp before Sweep drops it:
// longer than any verification leeway (config.MaxLeeway), so a token still
// accepted at use is never swept from under an admission.
const sweepLeeway = 2 * config.MaxLeeway

// openLedger opens the configured store: the bbolt file at cfg.LedgerPath(),
// or PostgreSQL, migrated before it returns. The description is safe to log:
// it never holds the DSN.
func openLedger(ctx context.Context, cfg config.Config) (ledger.Store, string, error) {
	l := cfg.Ledger
	if l.Driver == config.DriverPostgres {
		s, err := postgres.Open(ctx, postgres.Options{
			DSN: l.DSN, Schema: l.Schema, MaxConns: l.MaxConns,
			ConnectTimeout: time.Duration(l.ConnectTimeout), StatementTimeout: time.Duration(l.StatementTimeout),
			AcquireTimeout: time.Duration(l.AcquireTimeout), MigrationTimeout: time.Duration(l.MigrationTimeout),
		})
		if err != nil {
			return nil, "", err
		}
		schema := l.Schema
		if schema == "" {
			schema = postgres.DefaultSchema
		}
		return s, fmt.Sprintf("postgres (schema %s, version %d)", schema, postgres.SchemaVersion()), nil
	}
	path := cfg.LedgerPath()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, "", fmt.Errorf("data directory: %w", err)
	}
	s, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		return nil, "", err
	}
	return s, "bbolt " + path, nil
}

// startSweeper drops expired confirmation tokens every interval (never their
// tombstones: a consumed confirmation stays consumed). Replicas sharing a
// PostgreSQL ledger may all sweep; the store skips rows another holds. The
// returned function stops the sweeper and waits for it.
func startSweeper(ctx context.Context, store ledger.Store, interval time.Duration, log *slog.Logger) (stop func()) {
	if interval <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			sctx, done := context.WithTimeout(ctx, interval)
			n, err := store.Sweep(sctx, time.Now(), sweepLeeway)
			done()
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("ledger sweep failed", "swept", n, "err", err)
			case n > 0:
				log.Info("ledger sweep", "swept", n)
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}
