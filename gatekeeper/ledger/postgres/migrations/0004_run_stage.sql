-- itogate ledger, schema version 4: the run's stage and the run's-life
-- actions train.stage.advance and train.restart.
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.

-- The stage each run is in: written by its train.create, moved by each
-- train.stage.advance inside the commit (under the booking's lock).
ALTER TABLE runs ADD COLUMN stage text NOT NULL DEFAULT '';

-- What a stage advance moved (from_stage -> stage), a create's first stage,
-- and the checkpoint step a restart restarts from. Rows written before this
-- version get '' and 0.
ALTER TABLE admissions
    ADD COLUMN stage           text   NOT NULL DEFAULT '',
    ADD COLUMN from_stage      text   NOT NULL DEFAULT '',
    ADD COLUMN checkpoint_step bigint NOT NULL DEFAULT 0,
    ADD CONSTRAINT admissions_checkpoint_step_check CHECK (checkpoint_step >= 0),
    -- An advance names the stage it leaves and the one it enters, never the same.
    ADD CONSTRAINT admissions_stage_advance_check CHECK (
        state <> 'stage_advanced' OR (stage <> '' AND from_stage <> '' AND stage <> from_stage));

ALTER TABLE admissions DROP CONSTRAINT admissions_state_check;
ALTER TABLE admissions ADD CONSTRAINT admissions_state_check CHECK (
    state IN ('admitted', 'cancel_admitted', 'cleanup_admitted', 'release_admitted',
              'stage_advanced', 'restart_admitted'));
