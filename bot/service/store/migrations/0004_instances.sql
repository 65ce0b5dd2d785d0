-- One row per start of `serve`: what it starts on the container engine carries its id, so that
-- the next start removes what a dead one left and nothing a live neighbour runs. One machine has
-- one `serve` per database: a new start marks every earlier one stopped.
CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    last_heartbeat TEXT NOT NULL,
    stopped_at TEXT
);
