"""`paritybot status`: the queues, the agents and the running jobs, read from PostgreSQL with SQL."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

_QUEUES = """
SELECT queue, count(*) AS depth, min(created_at) AS oldest, extract(epoch FROM now() - min(created_at)) AS oldest_s
FROM jobs WHERE state = 'queued' GROUP BY queue ORDER BY queue
"""
_AGENTS = """
SELECT a.worker_id, a.host, a.name, a.labels, a.gpus, a.last_heartbeat,
       extract(epoch FROM now() - a.last_heartbeat) AS heartbeat_age_s,
       CASE WHEN a.lost_at IS NOT NULL THEN 'lost' ELSE 'alive' END AS state,
       (SELECT j.id FROM jobs j WHERE j.state = 'running' AND j.worker_id = a.worker_id LIMIT 1) AS current_job
FROM agents a WHERE a.stopped_at IS NULL ORDER BY a.host, a.worker_id
"""
_RUNNING = """
SELECT id, repo, pr_number, environment, queue, head_sha, host, worker_id, attempts, started_at,
       extract(epoch FROM now() - started_at) AS elapsed_s
FROM jobs WHERE state = 'running' ORDER BY started_at
"""


def fleet_status(url: str) -> dict[str, Any]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return {
            "queues": [_plain(r) for r in conn.execute(_QUEUES.encode())],
            "agents": [_plain(r) for r in conn.execute(_AGENTS.encode())],
            "running": [_plain(r) for r in conn.execute(_RUNNING.encode())],
        }


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, datetime):
            out[key] = value.isoformat()
        elif key.endswith("_s") and value is not None:
            out[key] = round(float(value), 1)
        else:
            out[key] = value
    return out


def render_status(status: dict[str, Any]) -> str:
    lines = ["Queues:"]
    lines += [f"  {q['queue']}: {q['depth']} waiting, oldest {q['oldest_s']:.0f} s" for q in status["queues"]]
    if not status["queues"]:
        lines.append("  (no job waiting)")
    lines.append("Agents:")
    for a in status["agents"]:
        job = a["current_job"] or "idle"
        lines.append(
            f"  {a['host']} ({a['name']}, worker {a['worker_id']}) labels {','.join(a['labels'])}, "
            f"GPUs {', '.join(a['gpus']) or 'none'}; {a['state']}, heartbeat {a['heartbeat_age_s']:.0f} s ago; {job}"
        )
    if not status["agents"]:
        lines.append("  (no agent)")
    lines.append("Running:")
    for r in status["running"]:
        pr = f"#{r['pr_number']}" if r["pr_number"] is not None else "default branch"
        lines.append(
            f"  {r['repo']} {pr} in {r['environment']} on {r['host']}: {r['elapsed_s']:.0f} s "
            f"(attempt {r['attempts']}, run {r['id']})"
        )
    if not status["running"]:
        lines.append("  (nothing running)")
    return "\n".join(lines)
