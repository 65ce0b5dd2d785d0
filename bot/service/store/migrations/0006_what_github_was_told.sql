-- One publisher (bot/service/publisher/): a run's state is written to the store first, and GitHub
-- is told from the store. What GitHub was last told of each run (reported_state) and how many
-- early-result writes it has not seen (progress beyond progress_published) say what is left to
-- publish, so a publish that a crash or GitHub interrupted is completed by the next pass.
ALTER TABLE jobs ADD COLUMN reported_state TEXT;
ALTER TABLE jobs ADD COLUMN progress INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN progress_published INTEGER NOT NULL DEFAULT 0;
-- Runs of an older release were told as they stand (a final one still due stays due).
UPDATE jobs SET reported_state = state;
CREATE INDEX IF NOT EXISTS jobs_unreported ON jobs(seq) WHERE reported_state IS NOT state OR progress > progress_published;
