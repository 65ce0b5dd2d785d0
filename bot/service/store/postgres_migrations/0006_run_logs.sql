-- Each step's whole output, as the run page shows it (docs/run-page.md): the events of every run in
-- the order they happened (seq). kind: step (a step started; text = its name), out (output), cut
-- (what the caps left out), end (how the step ended, JSON). attempt: the try of the run that wrote it.
CREATE TABLE run_log (
    seq bigserial PRIMARY KEY,
    job_id text NOT NULL,
    attempt integer NOT NULL,
    step integer NOT NULL,
    kind text NOT NULL,
    text text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_log_job ON run_log(job_id, seq);
CREATE INDEX run_log_at ON run_log(at);
-- Agents only add to the log (and NOTIFY the service, which needs no grant): they never read it.
GRANT INSERT ON run_log TO paritybot_agent;
GRANT USAGE ON SEQUENCE run_log_seq_seq TO paritybot_agent;
