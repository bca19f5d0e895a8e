-- itogate ledger, schema version 9: the scheduler job a run's tickets
-- started (ledger.Jobs; POST /v1/tickets/verify with a job id).
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.

-- One row per run, never deleted: the first scheduler job bound (the
-- scheduler identity's sub and its job id) is the run's for its whole life,
-- for every ticket of the run, renewed ones included.
CREATE TABLE run_jobs (
    run_id    text        PRIMARY KEY,
    scheduler text        NOT NULL,
    job_id    text        NOT NULL,
    bound_at  timestamptz NOT NULL
);
