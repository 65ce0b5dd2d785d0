"""structlog set-up: JSON lines in `serve`, readable lines on a terminal; secrets never logged.

Context (delivery id, repo, PR, run id) is bound with ``structlog.contextvars`` so every line of a
delivery or a run carries it without passing loggers around.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from bot.core.secrets import redact

_registered_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    """Values (the webhook secret, tokens) that must never appear in a log line."""
    if value:
        _registered_secrets.add(value)


def _redact_processor(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in list(event_dict.items()):
        if isinstance(value, str):
            event_dict[key] = redact(value, _registered_secrets)
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
