-- The first landed schema (commit b6441fe), verbatim: a database made by that release or a later one
-- before migrations existed already has these tables, and IF NOT EXISTS leaves them as they are.
CREATE TABLE IF NOT EXISTS deliveries (
    delivery_id TEXT PRIMARY KEY,
    event TEXT NOT NULL,
    body BLOB NOT NULL,
    received_at TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'received',
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    not_before TEXT
);
CREATE INDEX IF NOT EXISTS deliveries_pending ON deliveries(status) WHERE status = 'received';
CREATE TABLE IF NOT EXISTS intake_position (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    segment INTEGER NOT NULL,
    offset INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS installations (
    installation_id INTEGER PRIMARY KEY,
    account TEXT NOT NULL,
    action TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    queue TEXT NOT NULL,
    repo TEXT NOT NULL,
    pr_number INTEGER,
    head_sha TEXT NOT NULL,
    environment TEXT NOT NULL,
    request TEXT NOT NULL,
    dedupe_key TEXT NOT NULL UNIQUE,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    check_runs TEXT NOT NULL DEFAULT '{}',
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    started_at TEXT,
    finished_at TEXT,
    error TEXT,
    report TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, queue, seq);
CREATE INDEX IF NOT EXISTS jobs_pr ON jobs(repo, pr_number);
CREATE TABLE IF NOT EXISTS pulls (
    repo TEXT NOT NULL,
    pr_number INTEGER NOT NULL,
    comment_id INTEGER,
    comment_body_hash TEXT,
    last_verdict TEXT,
    failed_tests TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (repo, pr_number)
);
CREATE TABLE IF NOT EXISTS approvals (
    repo TEXT NOT NULL,
    pr_number INTEGER NOT NULL,
    sha TEXT NOT NULL,
    approver TEXT NOT NULL,
    approved_at TEXT NOT NULL,
    PRIMARY KEY (repo, pr_number, sha, approver)
);
CREATE TABLE IF NOT EXISTS baselines (
    repo TEXT NOT NULL,
    environment TEXT NOT NULL,
    facts TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (repo, environment)
);
