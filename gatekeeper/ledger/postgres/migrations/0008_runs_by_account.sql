-- itogate ledger, schema version 8: an account's runs in run id order, for
-- the run listing (GET /v1/runs, ledger.Store.Runs).
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.
-- Byte order (COLLATE "C"), as bbolt's index orders them, whatever the
-- database's collation: a page's cursor means the same on both stores.
CREATE INDEX runs_account_idx ON runs (account, run_id COLLATE "C");
