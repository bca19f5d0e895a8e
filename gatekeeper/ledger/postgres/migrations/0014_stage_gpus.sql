-- itogate ledger: stages that grow their run (issue 23, item 7). A
-- train.stage.advance into a stage larger than its run grows the run's
-- gpus (runs.gpus) to the stage's world size when its booking has the
-- difference free, decided inside the commit under the booking's lock like
-- a train.create's capacity; a run never shrinks. Each event that sets
-- what the run holds records it (run_events.gpus): a train.create's world
-- size, a stage advance's grown size; 0 for every other event. The
-- checkers read when a run held how many GPUs from them
-- (ledger.CheckHeld). No run grew before this version, so each run's
-- create event gets the run's gpus.
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.

ALTER TABLE run_events
    ADD COLUMN gpus integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT run_events_gpus_check CHECK (gpus >= 0);

UPDATE run_events e SET gpus = r.gpus
FROM runs r
WHERE e.run_id = r.run_id AND e.action = 'train.create';
