-- itogate ledger, schema version 2: the run's life, booking capacity,
-- confirmation bindings and revocations.
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.

-- What a confirmation's claims bind it to, recorded at deposit and re-checked
-- at commit whatever the policy decided. Rows deposited before this version
-- get '' and 0: they match no admission (fail closed) and expire within
-- minutes.
ALTER TABLE confirmations
    ADD COLUMN booking_id      text   NOT NULL DEFAULT '',
    ADD COLUMN manifest_digest text   NOT NULL DEFAULT '',
    ADD COLUMN run_id          text   NOT NULL DEFAULT '',
    ADD COLUMN cost_micro_usd  bigint NOT NULL DEFAULT 0;

ALTER TABLE admissions
    ADD COLUMN entitlement_jti text        NOT NULL DEFAULT '',
    ADD COLUMN caller_key_id   text        NOT NULL DEFAULT '',
    ADD COLUMN cost_micro_usd  bigint      NOT NULL DEFAULT 0,
    ADD COLUMN gpus            integer     NOT NULL DEFAULT 0,
    ADD COLUMN booked_gpus     integer     NOT NULL DEFAULT 0,
    ADD COLUMN live_until      timestamptz;

-- One row per run admitted by train.create. A run holds gpus of its booking
-- from admitted_at until ended_at (cancel, cleanup, booking release) or
-- live_until (declared wall-clock end + grace), whichever comes first.
CREATE TABLE runs (
    run_id          text        PRIMARY KEY,
    account         text        NOT NULL,
    booking_id      text        NOT NULL,
    manifest_digest text        NOT NULL,
    gpus            integer     NOT NULL,
    booked_gpus     integer     NOT NULL,
    admitted_at     timestamptz NOT NULL,
    live_until      timestamptz NOT NULL,
    ended_at        timestamptz,
    ended_by        text,
    CONSTRAINT runs_gpus_check CHECK (gpus > 0 AND booked_gpus > 0 AND gpus <= booked_gpus),
    CONSTRAINT runs_ended_check CHECK ((ended_at IS NULL) = (ended_by IS NULL)),
    CONSTRAINT runs_live_check CHECK (live_until > admitted_at)
);

-- The capacity check reads a booking's runs that may still be live.
CREATE INDEX runs_booking_live_idx ON runs (booking_id, live_until) WHERE ended_at IS NULL;

-- Bookings a booking.release admission released: no run is admitted on them
-- afterwards.
CREATE TABLE bookings (
    booking_id  text        PRIMARY KEY,
    released_at timestamptz NOT NULL,
    released_by text        NOT NULL
);

-- Revocations, kept until the revoked token's own expiry (Sweep drops them
-- after).
CREATE TABLE revocations (
    kind       text        NOT NULL,
    subject    text        NOT NULL,
    reason     text        NOT NULL,
    revoked_by text        NOT NULL,
    revoked_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT revocations_pkey PRIMARY KEY (kind, subject),
    CONSTRAINT revocations_kind_check CHECK (kind IN ('confirmation', 'entitlement', 'booking', 'caller_key'))
);
CREATE INDEX revocations_expiry_idx ON revocations (expires_at);
