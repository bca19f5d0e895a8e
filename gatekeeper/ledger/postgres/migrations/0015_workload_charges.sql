-- itogate ledger: the children of one owner are charged together (a
-- RayService's RayClusters during an upgrade, a JobSet's Jobs). Each child
-- workload that is not a Pod holds the GPUs the workload policy counted
-- for it; in the bind's transaction, under the binding row's lock, the
-- charges of the owner's children plus the new one must stay within the
-- run's GPUs (runs.gpus), else the bind is refused (ledger.Step). The
-- webhook sees no deletes: a charge stays until the run ends, unless a
-- child of the same name (a re-created object) takes it over. Children
-- bound before this version hold no charge until their next bind.
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.

CREATE TABLE workload_charges (
    run_id     text        NOT NULL REFERENCES workload_bindings (run_id),
    -- The child's controller uid; its children are charged together.
    owner_uid  text        NOT NULL,
    -- The child's "<group>/<kind>/<namespace>/<name>" (its uid when the
    -- bind named none): one name is one object at a time.
    name       text        NOT NULL,
    -- The object that holds the charge now.
    uid        text        NOT NULL,
    gpus       integer     NOT NULL CHECK (gpus >= 0),
    charged_at timestamptz NOT NULL,
    seq        bigserial   NOT NULL,
    CONSTRAINT workload_charges_pkey PRIMARY KEY (run_id, owner_uid, name)
);
