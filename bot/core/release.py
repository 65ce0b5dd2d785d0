"""This paritybot's version, the releases before it, and which releases read each database schema.

``VERSION`` is the one place a release's number is set: the package's metadata (pyproject reads it
from here), ``paritybot --version``, ``/healthz`` and the log's ``starting`` line all show it.
Git tags may not be kept, so each earlier release names its commit here and in CHANGELOG.md.

A release runs on a database at exactly its own schema version: it migrates an older one (one way
only) and refuses a newer one. Going back to an older release after an upgrade that migrated is
therefore "restore the backup taken before the upgrade" (deploy/README.md, step 8) unless the
older release reads the schema as it is; ``paritybot db status`` says which releases do.
"""

from __future__ import annotations

from typing import Literal

from packaging.version import Version
from pydantic import BaseModel, ConfigDict

# PEP 440. Between releases main carries the next one with `.dev0`; a release drops the suffix
# (CHANGELOG.md, "Releasing").
VERSION = "0.3.0.dev0"

Backend = Literal["sqlite", "postgresql"]


class Release(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: str
    commit: str
    date: str


# Oldest first. The commit is the last one of main that the release is.
RELEASES: tuple[Release, ...] = (
    Release(version="0.1.0", commit="b6441fe769e024f81dfa3dd95b98d4c9e984d732", date="2026-11-30"),
    Release(version="0.2.0", commit="b104accbb11f0853db6d324e7c50381913b21198", date="2026-12-01"),
)


class SchemaSpan(BaseModel):
    """The releases that run on a database at ``schema`` as it is: ``first`` to ``last``
    (``last`` None: up to this one). ``first`` None: no release has this schema (it existed only
    between releases; the next release migrates it)."""

    model_config = ConfigDict(frozen=True)

    backend: Backend
    schema_version: int
    first: str | None
    last: str | None


# Every schema version of each backend, 0 (SQLite: the unversioned schema of 0.1.0; PostgreSQL:
# an empty database) up to this release's. tests/test_release.py holds it to the migration files:
# a new migration needs a row here, and the row before it gets its `last`.
SCHEMAS: tuple[SchemaSpan, ...] = (
    SchemaSpan(backend="sqlite", schema_version=0, first="0.1.0", last="0.1.0"),
    SchemaSpan(backend="sqlite", schema_version=1, first=None, last=None),
    SchemaSpan(backend="sqlite", schema_version=2, first=None, last=None),
    SchemaSpan(backend="sqlite", schema_version=3, first="0.2.0", last="0.2.0"),
    SchemaSpan(backend="sqlite", schema_version=4, first=None, last=None),
    SchemaSpan(backend="sqlite", schema_version=5, first=None, last=None),
    SchemaSpan(backend="sqlite", schema_version=6, first=None, last=None),
    SchemaSpan(backend="sqlite", schema_version=7, first=None, last=None),
    SchemaSpan(backend="sqlite", schema_version=8, first="0.3.0", last=None),
    SchemaSpan(backend="postgresql", schema_version=0, first=None, last=None),
    SchemaSpan(backend="postgresql", schema_version=1, first=None, last=None),
    SchemaSpan(backend="postgresql", schema_version=2, first="0.2.0", last="0.2.0"),
    SchemaSpan(backend="postgresql", schema_version=3, first=None, last=None),
    SchemaSpan(backend="postgresql", schema_version=4, first=None, last=None),
    SchemaSpan(backend="postgresql", schema_version=5, first=None, last=None),
    SchemaSpan(backend="postgresql", schema_version=6, first=None, last=None),
    SchemaSpan(backend="postgresql", schema_version=7, first=None, last=None),
    SchemaSpan(backend="postgresql", schema_version=8, first="0.3.0", last=None),
)


def schema_span(backend: Backend, schema_version: int) -> SchemaSpan | None:
    return next((s for s in SCHEMAS if s.backend == backend and s.schema_version == schema_version), None)


def reads(span: SchemaSpan, version: str) -> bool:
    """Whether paritybot ``version`` runs on a database at ``span``'s schema without changing it.

    Releases are compared by their numbers alone: 0.3.0.dev0, on the way to 0.3.0, counts as it."""
    if span.first is None:
        return False
    wanted = _number(version)
    last = _number(span.last or VERSION)
    return _number(span.first) <= wanted <= last


def _number(version: str) -> tuple[int, ...]:
    return Version(version).release


def describe_readers(span: SchemaSpan) -> str:
    """Which releases run on this schema, in words."""
    if span.first is None:
        return "no release: it was only ever made by a commit between releases; this paritybot migrates it"
    if span.last is None:
        return f"paritybot {span.first} up to this one ({VERSION})"
    if span.first == span.last:
        return f"paritybot {span.first} only"
    return f"paritybot {span.first} to {span.last}"
