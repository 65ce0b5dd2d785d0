-- One row per start of `serve` (a replica) or of an agent, with a heartbeat: what an instance
-- starts on a container engine carries its id, and a delivery it handles is leased to it, so that
-- others remove its leftovers and take over its deliveries once it is silent, and never before.
CREATE TABLE instances (
    id text PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('serve', 'agent')),
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    last_heartbeat timestamptz NOT NULL DEFAULT now(),
    stopped_at timestamptz
);
-- The replica handling a delivery: another takes it over once that replica is silent.
ALTER TABLE deliveries ADD COLUMN leased_by text;
-- Agents record themselves and beat their own row; they read the others' to judge leftovers.
GRANT SELECT, INSERT, UPDATE (last_heartbeat, stopped_at) ON instances TO paritybot_agent;
