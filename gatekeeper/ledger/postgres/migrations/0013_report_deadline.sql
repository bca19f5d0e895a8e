-- itogate ledger: eval report deadlines (issue 23, item 5). A stage may
-- carry a report deadline from bundle data: the train.create or stage
-- advance that enters the stage records when its eval report is due
-- (report_due, NULL: no deadline), and the eval authority's passing report
-- for the stage, posted directly, is recorded beside it (report_*; a stage
-- advance clears it). Past report_due without a passing report recorded
-- before it the run counts as halted (ledger.RunRecord.Overdue): no
-- statement writes that, every reader computes it. Runs and events of
-- earlier versions have no deadline.
--
-- Runs inside the migration transaction with search_path set to the ledger's
-- schema, under an advisory lock; see migrate.go. Never edit a released
-- migration: add the next numbered file instead.

ALTER TABLE runs
    ADD COLUMN report_due         timestamptz,
    ADD COLUMN report_at          timestamptz,
    ADD COLUMN report_decision_id text NOT NULL DEFAULT '',
    ADD COLUMN report_stage       text NOT NULL DEFAULT '',
    ADD COLUMN report_digest      text NOT NULL DEFAULT '',
    ADD COLUMN report_by          text NOT NULL DEFAULT '',
    ADD CONSTRAINT runs_report_check CHECK ((report_at IS NULL) = (report_digest = ''));

-- The deadline a train.create or stage advance set for the stage it entered.
ALTER TABLE run_events ADD COLUMN report_due timestamptz;
