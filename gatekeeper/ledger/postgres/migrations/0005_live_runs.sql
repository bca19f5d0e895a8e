-- itogate ledger, schema version 5: reading a booking's live runs through
-- indexes only, whatever its history.
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.

-- A run is live at t when live_until > t and it was not ended at or before
-- t (ended_at IS NULL OR ended_at > t). The OR kept the planner from
-- runs_booking_live_idx, so the capacity check in every train.create commit
-- and the usage read scanned the whole runs table. The statements now ask
-- for the two halves separately: runs not ended, through
-- runs_booking_live_idx, and runs ended after t (a decision behind the
-- admission that ended them), through this index. Both visit only runs live
-- at t. Building it locks runs against writes for as long as it takes
-- (one pass over the table).
CREATE INDEX runs_booking_ended_idx ON runs (booking_id, ended_at) WHERE ended_at IS NOT NULL;
