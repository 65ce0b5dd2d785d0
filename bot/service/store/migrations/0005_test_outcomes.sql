-- Which tests failed, or were flaky, in each finished run: the history that names a failing test
-- "known flaky" (it failed and passed elsewhere) and the default branch's record of which tests
-- fail on a commit (answering "already failing on the base" without running them there).
-- test_runs: one row per recorded run (pr_number NULL: a run on the default branch); a run with
--   no failure has its row and no outcome, so "nothing failed on this commit" is known too.
CREATE TABLE IF NOT EXISTS test_runs (
    job_id TEXT PRIMARY KEY,
    repo TEXT NOT NULL,
    environment TEXT NOT NULL,
    pr_number INTEGER,
    head_sha TEXT NOT NULL,
    url TEXT NOT NULL,
    recorded_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS test_runs_commit ON test_runs(repo, head_sha);
CREATE TABLE IF NOT EXISTS test_outcomes (
    job_id TEXT NOT NULL REFERENCES test_runs(job_id) ON DELETE CASCADE,
    nodeid TEXT NOT NULL,
    outcome TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, nodeid)
);
CREATE INDEX IF NOT EXISTS test_outcomes_nodeid ON test_outcomes(nodeid);
