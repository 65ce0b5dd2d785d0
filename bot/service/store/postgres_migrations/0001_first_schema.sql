-- paritybot's tables in PostgreSQL (several hosts): the same records as the SQLite store, plus the
-- agents, the tokens handed to them, and the link from each run to its job in procrastinate's queue.
CREATE TABLE deliveries (
    seq bigserial UNIQUE,
    delivery_id text PRIMARY KEY,
    event text NOT NULL,
    body bytea NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    status text NOT NULL DEFAULT 'received',
    attempts integer NOT NULL DEFAULT 0,
    error text,
    not_before timestamptz,
    -- a serve replica handling it holds it until then; a replica that died lets it go at that time
    leased_until timestamptz,
    -- the pull request it is about (owner/name#number), when it is about one: a PR's deliveries are
    -- handled one after another in the order GitHub sent them, whichever replicas take them
    pr_key text
);
CREATE INDEX deliveries_pending ON deliveries (seq) WHERE status = 'received';
CREATE INDEX deliveries_pr_pending ON deliveries (pr_key, seq) WHERE status = 'received';

CREATE TABLE installations (
    installation_id bigint PRIMARY KEY,
    account text NOT NULL,
    action text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE jobs (
    id text PRIMARY KEY,
    seq bigserial UNIQUE,
    queue text NOT NULL,
    repo text NOT NULL,
    pr_number integer,
    head_sha text NOT NULL,
    environment text NOT NULL,
    request jsonb NOT NULL,
    dedupe_key text NOT NULL UNIQUE,
    state text NOT NULL,
    attempts integer NOT NULL DEFAULT 0,
    check_runs jsonb NOT NULL DEFAULT '{}',
    cancel_requested boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz,
    error text,
    report jsonb,
    -- the procrastinate job of the current attempt: the only one whose agent may write results
    queue_job_id bigint,
    -- the agent (procrastinate worker id) running the current attempt, and the host it runs on
    worker_id bigint,
    host text,
    -- the state GitHub was last told about; a job whose state differs is due to be reported
    reported_state text
);
CREATE INDEX jobs_state ON jobs (state, queue, seq);
CREATE INDEX jobs_pr ON jobs (repo, pr_number);
CREATE INDEX jobs_unreported ON jobs (seq) WHERE reported_state IS DISTINCT FROM state;

CREATE TABLE pulls (
    repo text NOT NULL,
    pr_number integer NOT NULL,
    comment_id bigint,
    comment_body_hash text,
    last_verdict text,
    failed_tests jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (repo, pr_number)
);

CREATE TABLE approvals (
    repo text NOT NULL,
    pr_number integer NOT NULL,
    sha text NOT NULL,
    approver text NOT NULL,
    approved_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (repo, pr_number, sha, approver)
);

CREATE TABLE baselines (
    repo text NOT NULL,
    environment text NOT NULL,
    facts jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (repo, environment)
);

-- One row per agent process: procrastinate's workers table has no host, labels or GPUs.
CREATE TABLE agents (
    worker_id bigint PRIMARY KEY,
    host text NOT NULL,
    name text NOT NULL,
    labels text[] NOT NULL,
    gpus jsonb NOT NULL DEFAULT '[]',
    probe jsonb,
    started_at timestamptz NOT NULL DEFAULT now(),
    last_heartbeat timestamptz NOT NULL DEFAULT now(),
    -- set by the reaper when it gave the agent's jobs to others: the agent must stop them too
    lost_at timestamptz,
    stopped_at timestamptz
);

-- A clone token per attempt: the agent asks with a public key of its own, the service answers with
-- a token scoped to the one repository, read-only, encrypted to that key. Nobody else who reads the
-- table (another agent, a backup) can use it; the row goes when the attempt ends.
CREATE TABLE job_tokens (
    queue_job_id bigint PRIMARY KEY,
    job_id text NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    public_key text NOT NULL,
    sealed bytea,
    expires_at timestamptz,
    error text,
    requested_at timestamptz NOT NULL DEFAULT now()
);

-- The agents' role: run jobs, never read deliveries, pull requests, approvals or installations.
-- Operators give each agent a login role that is a member of it (docs/security.md).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'paritybot_agent') THEN
        CREATE ROLE paritybot_agent NOLOGIN;
    END IF;
END
$$;
GRANT SELECT ON jobs, baselines TO paritybot_agent;
GRANT UPDATE (state, attempts, started_at, finished_at, error, report, queue_job_id, worker_id, host)
    ON jobs TO paritybot_agent;
GRANT SELECT, INSERT, UPDATE ON agents TO paritybot_agent;
GRANT SELECT, INSERT, DELETE ON job_tokens TO paritybot_agent;
