package postgres

import (
	"context"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
)

// lockRunSinks takes the transaction-scoped advisory lock of runID's
// sinks (ledger.SinkBoundError): BindJob takes it before it looks for the
// run's workload binding, BindWorkload before it looks for the run's job
// binding, so of two binds of one run in different sinks the second waits
// for the first to commit or roll back and then, reading committed rows
// (READ COMMITTED: a new snapshot per statement), sees its binding. The key
// is a 64-bit FNV-1a hash of the schema and run id: a collision with
// another run (or another application's advisory lock) only makes a bind
// wait, never skips the check. It needs no table: the lock goes with the
// transaction, and a connection pooler in transaction mode keeps it.
func (s *Store) lockRunSinks(ctx context.Context, tx pgx.Tx, runID string) error {
	h := fnv.New64a()
	_, _ = h.Write([]byte("itogate run sinks\x00" + s.opts.Schema + "\x00" + runID))
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(h.Sum64()))
	return err
}
