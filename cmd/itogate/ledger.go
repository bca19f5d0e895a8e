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
		Short: "Operate on a ledger: check its invariants (fsck)",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newLedgerCheckCmd(stdout))
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
		dsn := getenv(envLedgerDSN)
		if dsn == "" {
			return badInput(fmt.Errorf("--postgres: set $%s to the ledger's DSN", envLedgerDSN))
		}
		if !postgres.ValidSchema(o.schema) || !postgres.ValidPooler(o.pooler) {
			return badInput(fmt.Errorf("--schema %q or --pooler %q is not valid", o.schema, o.pooler))
		}
		s, err := postgres.Open(ctx, postgres.Options{DSN: dsn, Schema: o.schema, Pooler: o.pooler, MaxConns: 2})
		if err != nil {
			return fmt.Errorf("ledger check: %w", err)
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
