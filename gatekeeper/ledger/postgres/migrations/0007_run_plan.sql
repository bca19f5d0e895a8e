-- itogate ledger, schema version 7: the run's checkpoint plan, which bounds
-- its restarts.
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.

-- Recorded by the run's train.create (ledger.RunPlan): the checkpoint
-- interval and the run's steps (a restart may only start from a step the
-- plan writes), the declared wall-clock seconds and the work a restart is
-- expected to lose (which price the restart budget). Runs admitted before
-- this version have no plan (all 0): their restart steps are not checked.
ALTER TABLE runs
    ADD COLUMN plan_interval_steps        bigint NOT NULL DEFAULT 0,
    ADD COLUMN plan_steps                 bigint NOT NULL DEFAULT 0,
    ADD COLUMN plan_wall_clock_seconds    bigint NOT NULL DEFAULT 0,
    ADD COLUMN plan_lost_seconds          bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT runs_plan_check CHECK (
        plan_interval_steps >= 0 AND plan_steps >= 0 AND plan_wall_clock_seconds >= 0 AND plan_lost_seconds >= 0
        AND (plan_interval_steps = 0) = (plan_steps = 0));
