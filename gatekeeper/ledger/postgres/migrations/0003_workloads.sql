-- itogate ledger, schema version 3: the workload boundary.
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go.

-- The admission ticket signed for an allowed train.create, written in the
-- same statement as the admission so that a replay or a status lookup hands
-- back the very same ticket. Empty for other actions and for admissions made
-- while tickets were not configured (and for every row older than this
-- migration).
ALTER TABLE admissions ADD COLUMN ticket text NOT NULL DEFAULT '';

-- The one workload a run's ticket created: the first CREATE the admission
-- webhook allowed binds the run to that object's identity
-- ("<group>/<kind>/<namespace>/<name>"). Never deleted: a ticket creates one
-- workload for its whole life.
CREATE TABLE workload_bindings (
    run_id   text        PRIMARY KEY,
    identity text        NOT NULL,
    bound_at timestamptz NOT NULL
);

-- The object uids that belong to a bound workload: the root object's (one
-- per retried create of the same identity) and those of its controllers'
-- children that are workloads themselves (a JobSet's Jobs). A Pod is allowed
-- only when its controller's uid is here.
CREATE TABLE workload_uids (
    run_id   text        NOT NULL REFERENCES workload_bindings (run_id),
    uid      text        NOT NULL,
    added_at timestamptz NOT NULL,
    seq      bigserial   NOT NULL,
    CONSTRAINT workload_uids_pkey PRIMARY KEY (run_id, uid)
);
