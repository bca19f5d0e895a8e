-- itogate ledger, schema version 6: the run's state machine (halted,
-- revoked, restarts), its events, and the booking's account.
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.

-- The run's state beyond how it ended (ledger.RunRecord): the entitlement it
-- was admitted under (revoking it revokes the run), its restarts, the halt a
-- failed eval gate recorded, and the revocation that revoked it.
ALTER TABLE runs
    ADD COLUMN entitlement_jti        text        NOT NULL DEFAULT '',
    ADD COLUMN restarts               integer     NOT NULL DEFAULT 0,
    ADD COLUMN last_checkpoint_step   bigint      NOT NULL DEFAULT 0,
    ADD COLUMN halted_at              timestamptz,
    ADD COLUMN halt_decision_id       text        NOT NULL DEFAULT '',
    ADD COLUMN halt_stage             text        NOT NULL DEFAULT '',
    ADD COLUMN halt_report_digest     text        NOT NULL DEFAULT '',
    ADD COLUMN halt_failed_evals      text[]      NOT NULL DEFAULT '{}',
    ADD COLUMN halted_by              text        NOT NULL DEFAULT '',
    ADD COLUMN revoked_at             timestamptz,
    ADD COLUMN revocation_kind        text        NOT NULL DEFAULT '',
    ADD COLUMN revocation_subject     text        NOT NULL DEFAULT '',
    ADD COLUMN revoked_by             text        NOT NULL DEFAULT '',
    ADD COLUMN revocation_reason      text        NOT NULL DEFAULT '',
    ADD COLUMN revocation_decision_id text        NOT NULL DEFAULT '',
    ADD CONSTRAINT runs_restarts_check CHECK (restarts >= 0 AND last_checkpoint_step >= 0),
    ADD CONSTRAINT runs_halt_check CHECK ((halted_at IS NULL) = (halt_report_digest = '')),
    ADD CONSTRAINT runs_revocation_check CHECK (
        (revoked_at IS NULL) = (revocation_kind = '')
        AND revocation_kind IN ('', 'booking', 'entitlement'));

UPDATE runs r SET entitlement_jti = a.entitlement_jti
FROM admissions a WHERE a.run_id = r.run_id AND a.state = 'admitted';

UPDATE runs r SET restarts = x.n, last_checkpoint_step = x.last_step
FROM (SELECT run_id, count(*) AS n,
             (array_agg(checkpoint_step ORDER BY created_at DESC, decision_id DESC))[1] AS last_step
      FROM admissions WHERE state = 'restart_admitted' GROUP BY run_id) x
WHERE x.run_id = r.run_id;

-- An entitlement revocation finds the runs admitted under it.
CREATE INDEX runs_entitlement_idx ON runs (entitlement_jti) WHERE entitlement_jti <> '';

-- Every transition of a run, written in the same statement as its cause:
-- an admission on the run (to_state '' when it changed nothing: a cancel of
-- a run that had ended), a revocation, a halt. id orders a run's events as
-- they were written (they are serialized per booking). Never deleted.
CREATE TABLE run_events (
    id              bigserial   PRIMARY KEY,
    run_id          text        NOT NULL REFERENCES runs (run_id),
    at              timestamptz NOT NULL,
    to_state        text        NOT NULL,
    action          text        NOT NULL,
    decision_id     text        NOT NULL,
    actor           text        NOT NULL,
    reason          text        NOT NULL,
    stage           text        NOT NULL,
    checkpoint_step bigint      NOT NULL
);
CREATE INDEX run_events_run_idx ON run_events (run_id, id);

-- The events of the runs admitted before this version, from their
-- admissions in decision-time order: only the end the run records moved it.
INSERT INTO run_events (run_id, at, to_state, action, decision_id, actor, reason, stage, checkpoint_step)
SELECT run_id, at, to_state, action, decision_id, actor, '', stage, checkpoint_step FROM (
    SELECT a.run_id, a.created_at AS at,
        CASE
            WHEN a.state IN ('admitted', 'stage_advanced', 'restart_admitted') THEN 'live'
            WHEN a.action = r.ended_by AND a.created_at = r.ended_at AND a.state = 'cancel_admitted' THEN 'cancelled'
            WHEN a.action = r.ended_by AND a.created_at = r.ended_at AND a.state = 'cleanup_admitted' THEN 'cleaned_up'
            ELSE ''
        END AS to_state,
        a.action, a.decision_id, a.account AS actor, a.stage, a.checkpoint_step
    FROM admissions a JOIN runs r ON r.run_id = a.run_id
    WHERE a.state IN ('admitted', 'stage_advanced', 'restart_admitted', 'cancel_admitted', 'cleanup_admitted')
    UNION ALL
    SELECT r.run_id, a.created_at, 'released', a.action, a.decision_id, a.account, a.stage, a.checkpoint_step
    FROM runs r JOIN admissions a
        ON a.booking_id = r.booking_id AND a.state = 'release_admitted' AND a.created_at = r.ended_at
    WHERE r.ended_by = a.action
) e
ORDER BY at, decision_id;

-- A booking belongs to the account of its first admission: every action
-- naming it checks the binding. A row is written by a booking's first
-- admission (no longer only by its release); those admitted before this
-- version are bound to their earliest admission's account.
ALTER TABLE bookings
    ADD COLUMN account  text NOT NULL DEFAULT '',
    ADD COLUMN bound_at timestamptz,
    ALTER COLUMN released_at DROP NOT NULL,
    ALTER COLUMN released_by DROP NOT NULL;

INSERT INTO bookings (booking_id, account, bound_at)
SELECT DISTINCT ON (booking_id) booking_id, account, created_at
FROM admissions ORDER BY booking_id, created_at, decision_id
ON CONFLICT (booking_id) DO UPDATE SET account = EXCLUDED.account, bound_at = EXCLUDED.bound_at
WHERE bookings.account = '';

ALTER TABLE bookings
    ALTER COLUMN account DROP DEFAULT,
    ADD CONSTRAINT bookings_account_check CHECK (account <> '' AND bound_at IS NOT NULL),
    ADD CONSTRAINT bookings_released_check CHECK ((released_at IS NULL) = (released_by IS NULL));

-- The revocation's decision id (its decision-log line), carried onto the
-- runs it revokes.
ALTER TABLE revocations ADD COLUMN decision_id text NOT NULL DEFAULT '';
