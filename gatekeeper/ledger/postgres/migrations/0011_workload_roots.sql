-- itogate ledger, schema version 10: one root object of a workload runs at a
-- time (issue 22).
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go.

-- The root uid whose descendants may have children: set by the first child
-- bound under a root, moved to a newer root of the same name when that one's
-- first child is bound (the older object was deleted), never moved between
-- two objects of one generateName (ledger.Step). '' until the first child.
ALTER TABLE workload_bindings ADD COLUMN active_uid text NOT NULL DEFAULT '';

-- The root uid each uid descends from (a root's is itself). A uid bound
-- before this migration counts under its binding's first uid, as the bbolt
-- store reads a record without roots.
ALTER TABLE workload_uids ADD COLUMN root_uid text NOT NULL DEFAULT '';
UPDATE workload_uids u SET root_uid = f.uid
FROM (SELECT DISTINCT ON (run_id) run_id, uid FROM workload_uids ORDER BY run_id, seq) f
WHERE u.run_id = f.run_id;
