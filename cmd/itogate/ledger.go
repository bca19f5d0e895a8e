package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/itocompute/itogate/gatekeeper/config"
	"github.com/itocompute/itogate/gatekeeper/inert"
	"github.com/itocompute/itogate/gatekeeper/ledger"
	"github.com/itocompute/itogate/gatekeeper/ledger/bolt"
	"github.com/itocompute/itogate/gatekeeper/ledger/postgres"
	"github.com/itocompute/itogate/gatekeeper/safefile"
)

// envLedgerDSN names the environment variable `itogate ledger` reads a
// PostgreSQL DSN from: a DSN may hold a password, so it is never a flag.
const envLedgerDSN = "ITOGATE_LEDGER_DSN"

// exitLedgerInconsistent: ledger check found broken invariants.
const exitLedgerInconsistent = 1

func newLedgerCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Operate on a ledger: check its invariants (fsck), restore a bbolt backup or hold a restored PostgreSQL one",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newLedgerCheckCmd(stdout), newLedgerRestoreCmd(stdout))
	return cmd
}

type ledgerCheckOptions struct {
	file     string
	postgres bool
	schema   string
	pooler   string
	timeout  time.Duration
	json     bool
}

func newLedgerCheckCmd(stdout io.Writer) *cobra.Command {
	o := &ledgerCheckOptions{}
	cmd := &cobra.Command{
		Use:   "check (--file LEDGER.db | --postgres)",
		Short: "Check a ledger's invariants across every record (fsck); it only reads",
		Long: `Check a ledger's invariants across every record: every consumed confirmation
has the admission that consumed it and every admission's confirmation is
consumed by it; every train.create has its run; no booking ever held more GPUs
than it booked; every run's events replay to its record; the indexes agree
with the records. It only reads.

--file checks a bbolt ledger file: a stopped server's, or a backup (a running
server holds the file's lock: take a backup and check that). The file must be
of this binary's schema; it is opened read-only and never migrated.

--postgres checks a PostgreSQL ledger in one REPEATABLE READ snapshot, while
replicas keep serving; the DSN comes from $` + envLedgerDSN + ` (never a flag:
it may hold a password; PGPASSWORD and PGPASSFILE work as usual).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLedgerCheck(cmd.Context(), o, os.Getenv, stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.file, "file", "", "the bbolt ledger file to check (a stopped server's, or a backup)")
	f.BoolVar(&o.postgres, "postgres", false, "check the PostgreSQL ledger of $"+envLedgerDSN)
	f.StringVar(&o.schema, "schema", postgres.DefaultSchema, "with --postgres: the ledger's schema")
	f.StringVar(&o.pooler, "pooler", postgres.PoolerNone, "with --postgres: none or transaction (ledger.pooler)")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "bound on the whole check")
	f.BoolVar(&o.json, "json", false, "print the report as JSON")
	readsFile(f, "file")
	cmd.MarkFlagsMutuallyExclusive("file", "postgres")
	cmd.MarkFlagsOneRequired("file", "postgres")
	return cmd
}

// ledgerCheckReport is what `ledger check --json` prints.
type ledgerCheckReport struct {
	Store      string             `json:"store"`
	Consistent bool               `json:"consistent"`
	Counts     ledger.CheckReport `json:"counts"`
	Problems   string             `json:"problems,omitempty"`
}

func runLedgerCheck(ctx context.Context, o *ledgerCheckOptions, getenv func(string) string, stdout io.Writer) error {
	if o.timeout <= 0 {
		return badInput(fmt.Errorf("--timeout %v: must be positive", o.timeout))
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var (
		store ledger.Store
		desc  string
	)
	if o.file != "" {
		// The safe reader's checks first (no symlink, a regular file of
		// yours, not group/world-writable): bbolt would block on a FIFO.
		f, err := safefile.Open(o.file)
		if err != nil {
			return err
		}
		_ = f.Close()
		s, err := bolt.Open(o.file, bolt.Options{ReadOnly: true})
		if err != nil {
			return fmt.Errorf("ledger check: %w", err)
		}
		store, desc = s, "bbolt "+o.file
	} else {
		s, err := openLedgerPostgres(ctx, getenv, o.schema, o.pooler)
		if err != nil {
			return err
		}
		store, desc = s, "postgres schema "+o.schema
	}
	defer store.Close()
	checker, ok := store.(ledger.Checker)
	if !ok {
		return fmt.Errorf("ledger check: %s cannot check itself", desc)
	}
	rep, err := checker.Check(ctx)
	out := ledgerCheckReport{Store: desc, Consistent: err == nil, Counts: rep}
	switch {
	case errors.Is(err, ledger.ErrInconsistent):
		out.Problems = err.Error()
	case err != nil:
		return fmt.Errorf("ledger check: %w", err)
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		verdict := "consistent"
		if !out.Consistent {
			verdict = "INCONSISTENT"
		}
		fmt.Fprintf(stdout, "%s: %s: %d confirmations (%d available, %d consumed, %d expired; %d tokens swept), %d admissions, %d runs\n",
			inert.Text(desc), verdict, rep.Confirmations, rep.Available, rep.Consumed, rep.Expired, rep.Swept, rep.Admissions, rep.Runs)
		if out.Problems != "" {
			fmt.Fprintf(stdout, "problems: %s\n", inert.Text(out.Problems))
		}
	}
	if !out.Consistent {
		return exitError{exitLedgerInconsistent}
	}
	return nil
}

// openLedgerPostgres opens the PostgreSQL ledger of $ITOGATE_LEDGER_DSN in
// schema behind pooler (ledger check --postgres, ledger restore
// --postgres): a missing DSN or a bad schema or pooler is bad input.
func openLedgerPostgres(ctx context.Context, getenv func(string) string, schema, pooler string) (*postgres.Store, error) {
	dsn := getenv(envLedgerDSN)
	if dsn == "" {
		return nil, badInput(fmt.Errorf("--postgres: set $%s to the ledger's DSN", envLedgerDSN))
	}
	if !postgres.ValidSchema(schema) || !postgres.ValidPooler(pooler) {
		return nil, badInput(fmt.Errorf("--schema %q or --pooler %q is not valid", schema, pooler))
	}
	s, err := postgres.Open(ctx, postgres.Options{DSN: dsn, Schema: schema, Pooler: pooler, MaxConns: 2})
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return s, nil
}

type ledgerRestoreOptions struct {
	backup, to  string
	maxLifetime time.Duration

	postgres             bool
	schema, pooler, from string
}

func newLedgerRestoreCmd(stdout io.Writer) *cobra.Command {
	o := &ledgerRestoreOptions{}
	cmd := &cobra.Command{
		Use:   "restore (--backup FILE --to LEDGER.db | --postgres) --max-confirmation-lifetime DURATION",
		Short: "Restore a bbolt ledger backup, or hold a restored PostgreSQL ledger, until no lost consumption can be replayed",
		Long: `Restore a bbolt ledger backup (taken with SIGUSR1 or copied from a stopped server)
as the ledger file of a stopped server; or, with --postgres, hold the
PostgreSQL ledger of $` + envLedgerDSN + ` that you have just restored from a
dump with pg_restore (itogate does not read the dump: it checks the restored
ledger and writes the hold row, migration 0012's restore_hold).

The backup is copied beside --to, migrated to this binary's schema if older and
checked (an inconsistent backup is refused); a file already at --to is kept,
renamed to <file>.before-restore-<UTC time>. The restored ledger lacks what
happened after the backup: a confirmation it shows available may have been
consumed since, and one deposited and consumed since is missing, so it could
be deposited again. So the restored file carries a hold: until every such
confirmation has expired — the later of now plus --max-confirmation-lifetime
(the longest exp − iat your confirmation issuer mints) and the latest expiry
of the confirmations the backup shows available, plus the longest leeway
(5m) — the server refuses deposits and admissions (503, not ready) and
answers reads. Re-send the revocations issued after the backup.

On PostgreSQL every replica reads the hold when it starts and at each
readiness probe (/readyz), so write it before starting the replicas again.
--schema and --pooler are the server's ledger.schema and ledger.pooler;
--restored-from names the dump for the record.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runLedgerRestore(cmd.Context(), o, os.Getenv, stdout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.backup, "backup", "", "the backup file to restore")
	f.StringVar(&o.to, "to", "", "the ledger file of the stopped server (ledger.path; default <data_dir>/ledger.db)")
	f.DurationVar(&o.maxLifetime, "max-confirmation-lifetime", 0, "the longest lifetime (exp - iat) of a confirmation your issuer mints")
	f.BoolVar(&o.postgres, "postgres", false, "hold the PostgreSQL ledger of $"+envLedgerDSN+", just restored with pg_restore")
	f.StringVar(&o.schema, "schema", postgres.DefaultSchema, "with --postgres: the ledger's schema")
	f.StringVar(&o.pooler, "pooler", postgres.PoolerNone, "with --postgres: none or transaction (ledger.pooler)")
	f.StringVar(&o.from, "restored-from", "pg_restore", "with --postgres: the dump's name, recorded with the hold")
	readsFile(f, "backup")
	annotate(f, "to", valueWrites)
	plainValue(f, "max-confirmation-lifetime", "a duration, no confirmation")
	plainValue(f, "restored-from", "a name for the record; pg_restore reads the dump, itogate does not")
	_ = cmd.MarkFlagRequired("max-confirmation-lifetime")
	cmd.MarkFlagsRequiredTogether("backup", "to")
	cmd.MarkFlagsOneRequired("to", "postgres")
	cmd.MarkFlagsMutuallyExclusive("to", "postgres")
	cmd.MarkFlagsMutuallyExclusive("backup", "postgres")
	return cmd
}

func runLedgerRestore(ctx context.Context, o *ledgerRestoreOptions, getenv func(string) string, stdout io.Writer) error {
	if o.maxLifetime <= 0 {
		return badInput(fmt.Errorf("--max-confirmation-lifetime %v: must be positive", o.maxLifetime))
	}
	if o.postgres {
		return runLedgerHoldPostgres(ctx, o, getenv, stdout)
	}
	f, err := safefile.Open(o.backup)
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := bolt.Restore(ctx, f, o.backup, o.to, o.maxLifetime, config.MaxLeeway, time.Now())
	if err != nil {
		return err
	}
	t := inert.Text
	fmt.Fprintf(stdout, "restored %s to %s: %d confirmations (%d available), %d admissions, %d runs\n",
		t(o.backup), t(rep.Path), rep.Check.Confirmations, rep.Available, rep.Check.Admissions, rep.Check.Runs)
	if rep.Previous != "" {
		fmt.Fprintf(stdout, "the file it replaced: %s\n", t(rep.Previous))
	}
	printHold(stdout, rep.HoldUntil)
	return nil
}

func printHold(w io.Writer, until time.Time) {
	fmt.Fprintf(w, "held until %s: deposits and admissions are refused (503, not ready) until then; "+
		"re-send the revocations issued after the backup\n", until.Format(time.RFC3339))
}

// runLedgerHoldPostgres writes the hold into a PostgreSQL ledger restored
// with pg_restore (postgres.Store.Hold).
func runLedgerHoldPostgres(ctx context.Context, o *ledgerRestoreOptions, getenv func(string) string, stdout io.Writer) error {
	s, err := openLedgerPostgres(ctx, getenv, o.schema, o.pooler)
	if err != nil {
		return err
	}
	defer s.Close()
	rep, err := s.Hold(ctx, o.from, o.maxLifetime, config.MaxLeeway, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "held postgres schema %s (%s): %d confirmations (%d available), %d admissions, %d runs\n",
		inert.Text(o.schema), inert.Text(o.from), rep.Check.Confirmations, rep.Available, rep.Check.Admissions, rep.Check.Runs)
	printHold(stdout, rep.HoldUntil)
	return nil
}
