-- Which tests failed, or were flaky, in each finished run: the history that names a failing test
-- "known flaky" (it failed and passed elsewhere) and the default branch's record of which tests
-- fail on a commit (answering "already failing on the base" without running them there).
-- test_runs: one row per recorded run (pr_number NULL: a run on the default branch); a run with
--   no failure has its row and no outcome, so "nothing failed on this commit" is known too.
CREATE TABLE test_runs (
    job_id text PRIMARY KEY,
    repo text NOT NULL,
    environment text NOT NULL,
    pr_number integer,
    head_sha text NOT NULL,
    url text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX test_runs_commit ON test_runs(repo, head_sha);
CREATE TABLE test_outcomes (
    job_id text NOT NULL REFERENCES test_runs(job_id) ON DELETE CASCADE,
    nodeid text NOT NULL,
    outcome text NOT NULL,
    message text NOT NULL DEFAULT '',
    PRIMARY KEY (job_id, nodeid)
);
CREATE INDEX test_outcomes_nodeid ON test_outcomes(nodeid);
