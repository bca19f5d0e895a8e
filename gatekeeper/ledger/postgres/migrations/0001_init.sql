-- itogate ledger, schema version 1 (docs/architecture.md §3).
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.

-- Every confirmation ever deposited. Rows are never deleted: Sweep only drops
-- the token (token IS NULL is a tombstone), so neither a reference nor a jti
-- can be deposited twice and a consumed confirmation stays consumed forever.
CREATE TABLE confirmations (
    ref          text        PRIMARY KEY,
    jti          text        NOT NULL,
    account      text        NOT NULL,
    action       text        NOT NULL,
    token        bytea,
    expires_at   timestamptz NOT NULL,
    deposited_at timestamptz NOT NULL,
    state        text        NOT NULL,
    consumed_by  text,
    consumed_at  timestamptz,
    CONSTRAINT confirmations_jti_key UNIQUE (jti),
    CONSTRAINT confirmations_state_check CHECK (state IN ('available', 'consumed', 'expired')),
    CONSTRAINT confirmations_consumed_check CHECK (
        (state = 'consumed') = (consumed_by IS NOT NULL)
        AND (state = 'consumed') = (consumed_at IS NOT NULL)),
    CONSTRAINT confirmations_expired_check CHECK (state <> 'expired' OR token IS NULL)
);

-- Unswept tokens by expiry, for Sweep: its cost follows the tokens due, not
-- the tombstones kept forever.
CREATE INDEX confirmations_unswept_expiry_idx ON confirmations (expires_at) WHERE token IS NOT NULL;

-- Allowed admissions, keyed by (account, idempotency key). Never deleted:
-- they back idempotent replays.
CREATE TABLE admissions (
    account          text        NOT NULL,
    idempotency_key  text        NOT NULL,
    request_digest   text        NOT NULL,
    decision_id      text        NOT NULL,
    run_id           text        NOT NULL,
    action           text        NOT NULL,
    booking_id       text        NOT NULL,
    manifest_digest  text        NOT NULL,
    confirmation_ref text        NOT NULL REFERENCES confirmations (ref),
    confirmation_jti text        NOT NULL,
    bundle_revision  text        NOT NULL,
    state            text        NOT NULL,
    created_at       timestamptz NOT NULL,
    CONSTRAINT admissions_pkey PRIMARY KEY (account, idempotency_key),
    -- Defense in depth: even a bug in the Go code could not let two
    -- admissions consume one confirmation.
    CONSTRAINT admissions_confirmation_ref_key UNIQUE (confirmation_ref),
    CONSTRAINT admissions_state_check CHECK (
        state IN ('admitted', 'cancel_admitted', 'cleanup_admitted', 'release_admitted'))
);

-- Run answers with the train.create admission that created a run; a run id
-- is created once.
CREATE UNIQUE INDEX admissions_created_run_idx ON admissions (run_id) WHERE state = 'admitted';
