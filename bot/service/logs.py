"""structlog set-up: JSON lines in `serve`, readable lines on a terminal; secrets never logged.

Context (delivery id, repo, PR, run id) is bound with ``structlog.contextvars`` so every line of a
delivery or a run carries it without passing loggers around.

A log call never raises: the service's loops log inside their own error handling, and a value
that cannot be rendered (nested deeper than the JSON encoder recurses, say) or a stream that is
gone must not stop the loop that logs it. Such a line is still written, with the values that
render plainly and ``log_error`` saying what failed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import MutableMapping, Sequence
from typing import Any, TextIO

import structlog

from bot.core.release import VERSION
from bot.core.secrets import redact

_registered_secrets: set[str] = set()
_FALLBACK_VALUE_CHARS = 10_000
Processor = Any  # structlog's processor type, a callable (logger, method, event dict) → event dict


def register_secret(value: str | None) -> None:
    """Values (the webhook secret, tokens) that must never appear in a log line."""
    if value:
        _registered_secrets.add(value)


def _redact_processor(_: Any, __: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in list(event_dict.items()):
        if isinstance(value, str):
            event_dict[key] = redact(value, _registered_secrets)
    return event_dict


class _NeverRaise:
    """Runs the processors; if one raises, renders what it can instead (see the module's doc)."""

    def __init__(self, processors: Sequence[Processor]):
        self._processors = processors

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        result: Any = event_dict
        last_dict = event_dict  # the context merged in, the traceback formatted: what to fall back on
        try:
            for processor in self._processors:
                result = processor(logger, method, result)
                if isinstance(result, MutableMapping):
                    last_dict = result
            return result
        except Exception as exc:
            return _fallback_line(method, last_dict, exc)


def _fallback_line(method: str, event_dict: MutableMapping[str, Any], exc: Exception) -> str:
    plain: dict[str, Any] = {"level": method}
    for key, value in list(event_dict.items()):
        if isinstance(value, str):
            plain[str(key)] = redact(value[:_FALLBACK_VALUE_CHARS], _registered_secrets)
        elif value is None or isinstance(value, bool | int | float):
            plain[str(key)] = value
        else:
            plain[str(key)] = f"<{type(value).__name__}, not rendered>"
    plain["log_error"] = f"{type(exc).__name__} while rendering this line"
    return json.dumps(plain, default=str)


class _SafeStream:
    """The log stream; a write that fails (a closed pipe, a full disk) is dropped, not raised."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        with contextlib.suppress(OSError, ValueError):  # ValueError: the stream was closed
            return self._stream.write(text)
        return 0

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()


def configure_logging(fmt: str = "json", level: str = "info", stream: Any = None) -> None:
    renderer: Any = (
        structlog.processors.JSONRenderer() if fmt == "json" else structlog.dev.ConsoleRenderer(colors=False)
    )
    processors = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        _redact_processor,
        renderer,
    ]
    structlog.configure(
        processors=[_NeverRaise(processors)],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(_SafeStream(stream or sys.stderr)),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )


def log_start(command: str, deprecations: Sequence[str] = ()) -> None:
    """The first line a long-running command logs: which paritybot this is (CHANGELOG.md); then a
    warning for each old setting name in use."""
    log = structlog.get_logger("paritybot")
    log.info("starting", command=command, version=VERSION)
    for line in deprecations:
        log.warning("setting renamed", fix=line)
