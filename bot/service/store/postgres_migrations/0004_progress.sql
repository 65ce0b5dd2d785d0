-- Early results with agents: an agent writes a run's results so far (jobs.report) and counts the
-- write (progress); the service publishes the checks that finished and counts what it published
-- (progress_published), so each step is told to GitHub once, in order, whoever publishes it.
ALTER TABLE jobs ADD COLUMN progress integer NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN progress_published integer NOT NULL DEFAULT 0;
GRANT UPDATE (progress) ON jobs TO paritybot_agent;
