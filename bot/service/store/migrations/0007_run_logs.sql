-- Each step's whole output, as the run page shows it (docs/run-page.md): the events of every run in
-- the order they happened (seq). kind: step (a step started; text = its name), out (output), cut
-- (what the caps left out), end (how the step ended, JSON). attempt: the try of the run that wrote it.
CREATE TABLE IF NOT EXISTS run_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    step INTEGER NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS run_log_job ON run_log(job_id, seq);
CREATE INDEX IF NOT EXISTS run_log_at ON run_log(at);
