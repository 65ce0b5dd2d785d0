-- Whatever paritybot creates on GitHub, it finishes.
-- report_due: the job reached a final state that its check runs and the summary do not show yet;
--   the reconciler sends it until GitHub has it. The runs the old recovery failed in the database
--   only (their check runs stayed in progress) are due from the upgrade on.
-- heartbeat_at: a running job's worker says it is alive; a silent one's job is taken back.
-- check_runs_intent_at: set before the first request that creates the job's check runs, so a retry
--   looks them up (by external id) before it creates any.
-- check_run_sent: check kind → digest of the last body sent, so nothing is sent twice (annotations
--   append on every update).
ALTER TABLE jobs ADD COLUMN report_due INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN heartbeat_at TEXT;
ALTER TABLE jobs ADD COLUMN check_runs_intent_at TEXT;
ALTER TABLE jobs ADD COLUMN check_run_sent TEXT NOT NULL DEFAULT '{}';
UPDATE jobs SET report_due = 1
    WHERE state = 'failed' AND error = 'interrupted by a restart too many times' AND pr_number IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_report_due ON jobs(report_due) WHERE report_due = 1;
-- comment_pending: a new summary comment was being posted; until its id is saved, the next update
-- looks for it (marker and author) before it posts another.
ALTER TABLE pulls ADD COLUMN comment_pending INTEGER NOT NULL DEFAULT 0;
-- The process group of every step the host runner starts, so that a restart kills what a dead
-- process left running. A group is known by its id, the boot it ran in and its leader's start time.
CREATE TABLE IF NOT EXISTS step_processes (
    pgid INTEGER NOT NULL,
    boot_id TEXT NOT NULL,
    start_ticks INTEGER NOT NULL,
    job_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    step TEXT NOT NULL,
    started_at TEXT NOT NULL,
    PRIMARY KEY (pgid, boot_id, start_ticks)
);
