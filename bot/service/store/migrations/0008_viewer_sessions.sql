-- Viewers signed in with GitHub (docs/security.md, "The session"): a session ends on the server when
-- its viewer signs out, so a copy of the cookie replayed later is no session. key: the SHA-256 of
-- the random id the cookie carries (never the id itself, never the viewer's GitHub token). Times
-- are ISO 8601 in UTC, so the text compares as the times do.
CREATE TABLE IF NOT EXISTS viewer_sessions (
    key TEXT PRIMARY KEY,
    login TEXT NOT NULL,
    started_at TEXT NOT NULL,
    seen_at TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS viewer_sessions_expiry ON viewer_sessions(expires_at);
