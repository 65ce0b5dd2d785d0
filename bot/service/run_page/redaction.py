"""What a run's page and its record may say about the machines behind them: nothing.

The runner writes its reasons and errors for the operator — ``environment default runs its image
(engine at unix:///run/user/1000/docker.sock)``, ``no container engine reachable at
tcp://gpu3.corp:2376`` — and a step's output may name paths on the service's host, the host's own
name or a token. A public repository's run page and its JSON are served to anyone with the link,
so whatever they show is redacted here, at the edge where it is served (the runner's own words stay
as they are in the store and the logs, for the operator):

- container engines' addresses (``unix://``, ``tcp://``, ``ssh://``, ``npipe://``, ``fd://``) and
  any path to a socket (``….sock``);
- the service's own paths: workspaces, caches, the database, the App's key and secret files;
- this host's names, the engine's and the database's host names, names under internal-only
  domains (``.internal``, ``.corp``, ``.intranet``, ``.localdomain``, ``.home.arpa``,
  ``.cluster.local``) and private IPv4 addresses;
- the service's secrets and anything shaped like a credential (:func:`bot.core.secrets.redact`).

:class:`PublicRedaction` is pure; :func:`public_redaction` gathers what it hides from the settings
and the machine.
"""

from __future__ import annotations

import functools
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bot.core.run_log import LogEvent, LogKind, StepEnd
from bot.core.secrets import redact
from bot.render.run_record import RunRecord
from bot.service.settings import Settings, SettingsError

HIDDEN = "[internal]"
# What may follow an address or a path: anything but white space, quotes, brackets and the
# punctuation that ends one in prose or in JSON (so a JSON string stays a JSON string).
_REST = r"""[^\s"'`<>()\[\]{}\\,;]*"""
_ENGINE_ADDRESS = re.compile(r"\b(?:unix|npipe|tcp|ssh|fd)://" + _REST, re.IGNORECASE)
_SOCKET_PATH = re.compile(r"""(?<![\w.-])/[^\s"'`<>()\[\]{}\\,;:]*\.sock\b""")
_INTERNAL_NAME = re.compile(
    r"\b[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*"
    r"\.(?:internal|intranet|corp|localdomain|home\.arpa|cluster\.local)\b",
    re.IGNORECASE,
)
_PRIVATE_IPV4 = re.compile(
    r"(?<![\d.])(?:10(?:\.\d{1,3}){3}|192\.168(?:\.\d{1,3}){2}|172\.(?:1[6-9]|2\d|3[01])(?:\.\d{1,3}){2}"
    r"|169\.254(?:\.\d{1,3}){2})(?![\d.]*\d)"
)
_ADDRESSES = (_ENGINE_ADDRESS, _SOCKET_PATH)
_NAMES = (_INTERNAL_NAME, _PRIVATE_IPV4)
MIN_HOST_NAME = 4  # a shorter host name ("ci", "gpu") is a common word too: left to the patterns


@dataclass(frozen=True)
class PublicRedaction:
    """Hides ``secrets`` (as ``***``), ``paths`` (and whatever lies under them) and ``hosts`` (as
    whole names), besides the patterns every service hides."""

    secrets: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()

    @functools.cached_property
    def _named(self) -> re.Pattern[str] | None:
        parts = [re.escape(p) + _REST for p in sorted(set(self.paths), key=len, reverse=True)]
        parts += [
            rf"(?<![\w.-]){re.escape(h)}(?![\w-])" for h in sorted(set(self.hosts), key=len, reverse=True)
        ]
        return re.compile("|".join(parts), re.IGNORECASE) if parts else None

    def text(self, text: str) -> str:
        text = redact(text, self.secrets)
        # Whole addresses first, so that a host name inside one does not leave the rest behind.
        for pattern in _ADDRESSES:
            text = pattern.sub(HIDDEN, text)
        if self._named is not None:
            text = self._named.sub(HIDDEN, text)
        for pattern in _NAMES:
            text = pattern.sub(HIDDEN, text)
        return text

    def value(self, value: Any) -> Any:
        """Every string inside ``value`` (JSON-like: dicts, lists, scalars) redacted; keys too."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.value(v) for k, v in value.items()}
        return value

    def record(self, record: RunRecord) -> RunRecord:
        return RunRecord.model_validate(self.value(record.model_dump(mode="json")))

    def event(self, event: LogEvent) -> LogEvent:
        if event.kind == LogKind.END:  # JSON: its fields are redacted, so it stays readable
            end = StepEnd.parse(event.text)
            text = end.model_copy(update={"reason": self.text(end.reason)}).text()
        else:
            text = self.text(event.text)
        return event if text == event.text else event.model_copy(update={"text": text})

    def events(self, events: Iterable[LogEvent]) -> list[LogEvent]:
        return [self.event(e) for e in events]


NOTHING_MORE = PublicRedaction()
"""The patterns alone: what a run page redacts when it is given nothing of its service."""


def public_redaction(settings: Settings) -> PublicRedaction:
    """What the service's settings and its machine name, to be hidden from public pages."""
    paths = [settings.workspace_root, settings.cache_root, *(p for p in settings.app_files().values() if p)]
    if not settings.is_postgres:
        paths.append(settings.sqlite_path.parent)
    hosts = [socket.gethostname(), socket.getfqdn()]
    for url in (os.environ.get("DOCKER_HOST", ""), settings.database_url):
        hosts.append(urlsplit(url).hostname or "")
    public = urlsplit(settings.public_url or "").hostname
    return PublicRedaction(
        secrets=settings.service_secrets() + _other_secrets(settings),
        paths=tuple(sorted({s for p in paths for s in _path_forms(p)})),
        hosts=tuple(sorted({h for h in hosts if _private_host(h, public)})),
    )


def _other_secrets(settings: Settings) -> tuple[str, ...]:
    """The App's client secret and the operators' token, when the service has them."""
    found: list[str] = []
    for read in (settings.viewer_sign_in, settings.operator_token):
        try:
            value = read()
        except SettingsError:
            continue  # unreadable: the service says so where it needs it
        if isinstance(value, tuple):
            found.append(value[1])
        elif value:
            found.append(value)
    return tuple(found)


def _path_forms(path: Path) -> set[str]:
    """The path as configured and resolved, when it is specific enough to hide (two levels deep at
    least: hiding ``/tmp`` would hide half of any traceback)."""
    forms = {str(path), str(path.resolve())} if path.is_absolute() else {str(path.resolve())}
    return {f.rstrip("/") for f in forms if len(Path(f).parts) >= 3}


def _private_host(name: str, public: str | None) -> bool:
    name = name.lower()
    return len(name) >= MIN_HOST_NAME and name not in ("localhost", "localhost.localdomain", public or "")
