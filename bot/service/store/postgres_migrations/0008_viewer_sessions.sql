-- Viewers signed in with GitHub (docs/security.md, "The session"): a session ends on the server when
-- its viewer signs out, so a copy of the cookie replayed later is no session, on every replica.
-- key: the SHA-256 of the random id the cookie carries (never the id itself, never the viewer's
-- GitHub token). Agents get no grant: sessions are the web pages' alone.
CREATE TABLE viewer_sessions (
    key text PRIMARY KEY,
    login text NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX viewer_sessions_expiry ON viewer_sessions(expires_at);
