"""Several hosts: agents that run jobs from procrastinate's queue, and what the service does for
them (clone tokens, reports, the reaper, per-PR locks across replicas, the status command)."""
