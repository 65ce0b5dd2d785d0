"""structlog set-up: JSON lines in `serve`, readable lines on a terminal; secrets never logged.

Context (delivery id, repo, PR, run id) is bound with ``structlog.contextvars`` so every line of a
delivery or a run carries it without passing loggers around.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

# Installation tokens (ghs_…), personal tokens (ghp_, github_pat_…), JWTs and PEM blocks.
_SECRET_PATTERNS = re.compile(
    r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"
    r"|x-access-token:[^@\s]+"
)
_registered_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Values (the webhook secret, tokens) that must never appear in a log line."""
    if value and len(value) >= 4:
        _registered_secrets.add(value)


def redact(text: str) -> str:
    for secret in _registered_secrets:
        if secret in text:
            text = text.replace(secret, "***")
    return _SECRET_PATTERNS.sub("***", text)


def _redact_processor(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in list(event_dict.items()):
        if isinstance(value, str):
            event_dict[key] = redact(value)
    return event_dict


def configure_logging(fmt: str = "json", level: str = "info", stream: Any = None) -> None:
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _redact_processor,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
