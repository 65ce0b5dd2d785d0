-- Whatever paritybot creates on GitHub, it finishes (the same columns as SQLite's migration 3).
-- report_due: the job reached a final state that its check runs and the summary do not show yet;
--   set in the same transaction as that state, cleared by the reconciler once GitHub has it all.
--   Final runs of a PR that the service had not told GitHub about are due from the upgrade on.
-- check_runs_intent_at: set before the first request that creates the job's check runs, so a retry
--   looks them up (by external id) before it creates any.
-- check_run_sent: check kind → digest of the last body sent, so nothing is sent twice.
ALTER TABLE jobs ADD COLUMN report_due boolean NOT NULL DEFAULT false;
ALTER TABLE jobs ADD COLUMN check_runs_intent_at timestamptz;
ALTER TABLE jobs ADD COLUMN check_run_sent jsonb NOT NULL DEFAULT '{}';
UPDATE jobs SET report_due = true
    WHERE state NOT IN ('queued', 'running') AND pr_number IS NOT NULL AND reported_state IS DISTINCT FROM state;
CREATE INDEX jobs_report_due ON jobs (seq) WHERE report_due;
-- comment_pending: a new summary comment was being posted; until its id is saved, the next update
-- looks for it (marker and author) before it posts another.
ALTER TABLE pulls ADD COLUMN comment_pending boolean NOT NULL DEFAULT false;
-- The process group of every step a host runner starts (see SQLite's migration 3).
CREATE TABLE step_processes (
    pgid integer NOT NULL,
    boot_id text NOT NULL,
    start_ticks bigint NOT NULL,
    job_id text NOT NULL,
    attempt integer NOT NULL,
    step text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pgid, boot_id, start_ticks)
);
-- An agent's result and the reaper's end of a run mark it due in the same statement.
GRANT UPDATE (report_due) ON jobs TO paritybot_agent;
