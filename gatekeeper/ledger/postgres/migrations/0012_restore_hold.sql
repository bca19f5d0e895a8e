-- itogate ledger: the restore hold (issue 25). After an operator restores a
-- dump (pg_restore), `itogate ledger restore --postgres` writes the one row
-- of this table; until hold_until every replica refuses deposits and
-- commits and is not ready (ledger.HoldEnd, ledger.Held).
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go.

CREATE TABLE restore_hold (
	id            boolean PRIMARY KEY DEFAULT true CHECK (id), -- one row at most
	hold_until    timestamptz NOT NULL,
	restored_at   timestamptz NOT NULL,
	restored_from text NOT NULL
);
