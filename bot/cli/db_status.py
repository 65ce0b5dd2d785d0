"""`paritybot db status`: the database's schema version and which releases run on it as it is.

Before going back to an older release (deploy/README.md, step 8), `--release OLD` answers whether
that release can run on this database (exit 0) or the backup taken before the upgrade must be
restored first (exit 1). Nothing is changed: the database is only read.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from bot.core.release import VERSION, Backend, describe_readers, reads, schema_span
from bot.service.settings import Settings, SettingsError
from bot.service.store.postgres_schema import migrations as postgres_migrations
from bot.service.store.postgres_schema import safe_url
from bot.service.store.schema_state import postgres_schema_version, sqlite_schema_version
from bot.service.store.sqlite_schema import migrations as sqlite_migrations


def db_status_main(settings: Settings, release: str | None) -> int:
    if release is not None:
        try:
            Version(release)
        except InvalidVersion:
            raise SettingsError(f"--release {release}: not a version (e.g. 0.2.0)") from None
    backend: Backend
    if settings.is_postgres:
        backend, where = "postgresql", safe_url(settings.database_url)
        schema = postgres_schema_version(settings.database_url, where)
        ours = postgres_migrations()[-1].version
    else:
        backend, where = "sqlite", f"sqlite:///{settings.sqlite_path}"
        schema = sqlite_schema_version(settings.sqlite_path)
        ours = sqlite_migrations()[-1].version
    lines, ok = status_lines(backend, where, schema, ours, release)
    print("\n".join(lines))
    return 0 if ok else 1


def status_lines(
    backend: Backend, where: str, schema: int | None, ours: int, release: str | None
) -> tuple[list[str], bool]:
    """What `db status` prints, and whether ``release`` (if asked) runs on the database as it is."""
    if schema is None:
        lines = [f"{where}: no paritybot database yet; paritybot {VERSION} creates schema {ours}"]
        return lines, True
    lines = [f"{where}: {backend} schema {schema}; this paritybot ({VERSION}) is at schema {ours}"]
    span = schema_span(backend, schema)
    if span is None:
        lines.append(
            f"runs on it: a release newer than this one (its schema is {ours}); its `paritybot db "
            "status` names which"
        )
    else:
        lines.append(f"runs on it as it is: {describe_readers(span)}")
        if schema < ours:
            lines.append(f"paritybot {VERSION} migrates it to schema {ours} at start-up (one way)")
    if release is None:
        return lines, True
    if span is not None and reads(span, release):
        lines.append(f"paritybot {release}: runs on this database as it is")
        return lines, True
    if schema < ours and Version(release) >= Version(VERSION):
        lines.append(f"paritybot {release}: migrates this database at start-up (take a backup first)")
        return lines, True
    lines.append(
        f"paritybot {release}: cannot run on this database; restore the backup taken before the "
        "upgrade first (deploy/README.md, step 8)"
    )
    return lines, False
