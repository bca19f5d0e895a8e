-- itogate ledger, schema version 9: the checkpoint storage a run keeps and
-- its booking's quota, so that the booking's live runs together stay within
-- the quota (checked at commit, like the GPUs).
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.

-- Recorded by the run's train.create (ledger.RunPlan): checkpoint size ×
-- retention in GiB, rounded up, and the booking's checkpoint quota when it
-- was admitted (0: none known). Runs admitted before this version keep 0.
ALTER TABLE runs
    ADD COLUMN plan_checkpoint_gib     bigint NOT NULL DEFAULT 0,
    ADD COLUMN plan_storage_quota_gib  bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT runs_storage_check CHECK (plan_checkpoint_gib >= 0 AND plan_storage_quota_gib >= 0);
