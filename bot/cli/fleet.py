"""The several-hosts commands: `paritybot agent`, `paritybot db upgrade`, `paritybot status`."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

from bot.service.logs import configure_logging, log_start
from bot.service.settings import Settings, SettingsError

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def parse_labels(text: str) -> list[str]:
    labels = [part.strip() for part in text.split(",") if part.strip()]
    bad = [label for label in labels if not _LABEL.fullmatch(label)]
    if not labels or bad:
        raise SettingsError(f"--labels: {', '.join(bad) or 'none given'}: labels are letters, digits, . _ -")
    return labels


def agent_main(settings: Settings, labels_text: str, name: str) -> int:
    from bot.service.fleet.run import run_agent

    labels = parse_labels(labels_text)
    settings.require_agent()
    configure_logging(settings.log_format, settings.log_level)
    log_start("agent", settings.deprecation_warnings())
    return asyncio.run(run_agent(settings, labels, name))


def db_upgrade_main(settings: Settings) -> int:
    if settings.is_postgres:
        import psycopg

        from bot.service.store.postgres_schema import migrate, safe_url

        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            version, applied = migrate(conn, safe_url(settings.database_url))
        done = ", ".join(applied) if applied else "none needed"
        print(
            f"{safe_url(settings.database_url)}: paritybot schema {version}; procrastinate migrations applied: {done}"
        )
        return 0
    from bot.service.store.sqlite import SQLiteStore

    store = SQLiteStore(Path(settings.sqlite_path))
    store.close()
    print(f"{settings.sqlite_path}: paritybot schema {store.schema_version}")
    return 0


def status_main(settings: Settings, *, as_json: bool) -> int:
    if not settings.is_postgres:
        print(
            "paritybot: status needs PARITYBOT_DATABASE_URL=postgresql://… (several hosts)", file=sys.stderr
        )
        return 2
    from bot.service.fleet.status import fleet_status, render_status

    status = fleet_status(settings.database_url)
    print(json.dumps(status, indent=2) if as_json else render_status(status))
    return 0
