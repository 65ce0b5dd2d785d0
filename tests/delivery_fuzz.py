"""Hostile deliveries for fuzzing the service, built from GitHub's own material.

Each body starts as one of GitHub's real webhook examples (tests/payloads.py), most of them
pointed at the repository and installation under test so that the handlers get past their first
API call, then has one to three values changed:

* to a value GitHub's webhook schema allows there but no real payload has (any string where a
  name goes, any integer where a number goes), drawn by hypothesis-jsonschema from the vendored
  schema's definition of that field;
* to a value of another type, out of range, huge, or nested deeper than parsers recurse;
* to another value of the same payload (a number where a name goes, an object where a SHA goes);
* or the key is removed.

Paths are drawn over the whole payload, half the time among the keys handlers commonly read.
Bodies are signed with the webhook secret; :func:`mis_signed_deliveries` makes the ones an
attacker without it could send.
"""

from __future__ import annotations

import copy
import functools
import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import payloads
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

HANDLED = ("pull_request", "issue_comment", "check_run", "push", "installation", "installation_repositories")
# Keys any GitHub App reads: where a hostile value is likeliest to matter.
READ_KEYS = frozenset(
    [
        "action",
        "installation",
        "id",
        "account",
        "login",
        "repository",
        "full_name",
        "name",
        "clone_url",
        "default_branch",
        "pull_request",
        "number",
        "state",
        "draft",
        "user",
        "type",
        "author_association",
        "head",
        "base",
        "sha",
        "ref",
        "repo",
        "labels",
        "body",
        "issue",
        "comment",
        "changes",
        "from",
        "sender",
        "check_run",
        "head_sha",
        "app",
        "slug",
        "pull_requests",
        "after",
        "deleted",
    ]
)
Path = tuple[str | int, ...]
T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    """The repository, installation and fake GitHub the service under test knows."""

    repo: str
    clone_url: str
    installation_id: int
    api_url: str
    secret: str


@dataclass(frozen=True)
class Nested:
    """A value nested ``depth`` objects deep, written into the body as raw JSON at encoding."""

    depth: int

    @property
    def marker(self) -> str:
        return f"\x00nested-{self.depth}\x00"

    def raw(self) -> bytes:
        return b'{"a":' * self.depth + b"1" + b"}" * self.depth


@dataclass(frozen=True)
class FuzzDelivery:
    event: str
    body: bytes
    headers: dict[str, str]
    changes: tuple[str, ...]  # what was changed, for a failure's report

    def __repr__(self) -> str:
        return f"FuzzDelivery({self.event}, changes={list(self.changes)}, {len(self.body)} bytes)"


# --- GitHub's material -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Base:
    """One real example, as sent or pointed at the target, with its paths worked out once."""

    event: str
    text: str  # the payload as JSON: json.loads makes a fresh copy faster than deepcopy
    definition: str  # its schema definition
    paths: tuple[Path, ...]
    read_paths: tuple[Path, ...]


@functools.cache
def _bases(target: Target) -> tuple[_Base, ...]:
    out = []
    for event, examples in payloads.examples().items():
        for example in examples:
            pointed = _pointed(json.loads(json.dumps(example)), target)
            # Four in five pointed at what the service knows; the handled events four times as often.
            variants = [pointed] * 4 + [example]
            for payload in variants * (4 if event in HANDLED else 1):
                paths = tuple(_paths(payload))
                out.append(
                    _Base(
                        event,
                        json.dumps(payload),
                        payloads.schema_key(event, payload),
                        paths,
                        tuple(p for p in paths if p[-1] in READ_KEYS),
                    )
                )
    return tuple(out)


def _paths(node: Any, prefix: Path = ()) -> Iterator[Path]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield (*prefix, i)
            yield from _paths(value, (*prefix, i))


@functools.cache
def _definitions() -> dict[str, Any]:
    definitions: dict[str, Any] = payloads.schema()["definitions"]
    return definitions


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = _definitions()[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _branches(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    node = _resolve(node)
    yield node
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(key, []):
            yield from _branches(sub)


def _field_schema(definition: str, path: Path) -> dict[str, Any] | None:
    """The schema of the field at ``path`` in the event's definition, if it is a plain value's."""
    node: dict[str, Any] | None = {"$ref": f"#/definitions/{definition}"}
    for key in path:
        assert node is not None
        node = next(
            (
                b["items"] if isinstance(key, int) else b["properties"][key]
                for b in _branches(node)
                if ("items" in b if isinstance(key, int) else key in b.get("properties", {}))
            ),
            None,
        )
        if node is None:
            return None
    leaf = _resolve(node)
    text = json.dumps(leaf)
    if "$ref" in text or '"object"' in text or '"array"' in text:
        return None  # only plain values: hypothesis-jsonschema draws those quickly
    return {k: v for k, v in leaf.items() if k not in ("$schema", "description", "title", "examples")}


@functools.cache
def _schema_values(schema_text: str) -> st.SearchStrategy[Any] | None:
    try:
        strategy = from_schema(json.loads(schema_text))
        strategy.validate()
    except Exception:  # a schema hypothesis-jsonschema cannot draw from: the other kinds of change do
        return None
    return strategy


# --- values ------------------------------------------------------------------------------------------

HOSTILE = st.sampled_from(
    [
        None,
        True,
        False,
        0,
        -1,
        2**31,
        2**63,
        10**30,
        1e308,
        -1e308,
        0.5,
        "",
        "None",
        "{}",
        "{/x}",
        "%7B%7D",
        "../..",
        "octo-org/..",
        "--upload-pack=touch /tmp/x",
        "refs/heads/main\nX-Injected: 1",
        "\x00",
        "é" * 40,
        "a" * 70_000,
        {},
        [],
        {"$ne": ""},
        [1, [2, [3]]],
        [{"name": "x"}] * 5_000,
    ]
) | st.integers(1, 1_100).map(Nested)


@st.composite
def _changed(draw: st.DrawFn, base: _Base, rnd: random.Random) -> tuple[dict[str, Any], tuple[str, ...]]:
    payload: dict[str, Any] = json.loads(base.text)
    done: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        read = base.read_paths and draw(st.booleans())
        path = _pick(rnd, base.read_paths if read else base.paths)
        try:
            parent = _at(payload, path[:-1])
            parent[path[-1]]
        except (KeyError, IndexError, TypeError):
            continue
        kind = draw(st.sampled_from(["schema", "hostile", "hostile", "swap", "remove"]))
        if kind == "remove" and isinstance(parent, dict):
            del parent[path[-1]]
            done.append(f"removed {_name(path)}")
            continue
        schema = _field_schema(base.definition, path) if kind == "schema" else None
        values = _schema_values(json.dumps(schema, sort_keys=True)) if schema is not None else None
        if values is not None:
            value = draw(values)
        elif kind == "swap":
            try:
                value = copy.deepcopy(_at(payload, _pick(rnd, base.paths)))
            except (KeyError, IndexError, TypeError):
                continue
        else:
            value = draw(HOSTILE)
        parent[path[-1]] = value
        done.append(f"{_name(path)} = {_short(value)}")
    return payload, tuple(done)


def _pick(rnd: random.Random, items: tuple[T, ...]) -> T:
    # Uniformly (hypothesis's own integers favour the ends of a range), and not with
    # sampled_from, which hashes every item on each draw to label the strategy.
    return items[rnd.randrange(len(items))]


def _at(node: Any, path: Path) -> Any:
    for key in path:
        node = node[key]
    return node


def _name(path: Path) -> str:
    return ".".join(map(str, path))


def _short(value: Any) -> str:
    if isinstance(value, Nested):
        return f"<nested {value.depth} deep>"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def encode(payload: dict[str, Any]) -> bytes:
    """The body, with each :class:`Nested` written as raw JSON (the encoder would recurse)."""
    nested: list[Nested] = []

    def default(value: Any) -> Any:
        if isinstance(value, Nested):
            nested.append(value)
            return value.marker
        raise TypeError(type(value).__name__)

    body = json.dumps(payload, separators=(",", ":"), default=default).encode()
    for value in nested:
        body = body.replace(json.dumps(value.marker).encode(), value.raw(), 1)
    return body


def _pointed(payload: dict[str, Any], target: Target) -> dict[str, Any]:
    if "repository" in payload:
        return payloads.pointed_at(
            payload,
            repo_full_name=target.repo,
            clone_url=target.clone_url,
            installation_id=target.installation_id,
            api_url=target.api_url,
        )
    if isinstance(payload.get("installation"), dict):
        payload["installation"]["id"] = target.installation_id
    return payload


@st.composite
def _payloads(draw: st.DrawFn, target: Target) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    rnd = draw(st.randoms(use_true_random=True))
    base = _pick(rnd, _bases(target))
    payload, changes = draw(_changed(base, rnd))
    return base.event, payload, changes


@st.composite
def signed_deliveries(draw: st.DrawFn, target: Target) -> FuzzDelivery:
    event, payload, changes = draw(_payloads(target))
    body = encode(payload)
    delivery_id = str(
        uuid.uuid4()
    )  # never drawn: hypothesis repeats values, and a repeated id is a redelivery
    return FuzzDelivery(
        event, body, payloads.webhook_headers(event, body, target.secret, delivery_id=delivery_id), changes
    )


@st.composite
def mis_signed_deliveries(draw: st.DrawFn, target: Target) -> FuzzDelivery:
    """What anyone without the secret can send: another key, a body changed after signing, a
    signature in another form, or none."""
    delivery = draw(signed_deliveries(target))
    headers = dict(delivery.headers)
    body = delivery.body
    how = draw(st.sampled_from(["other secret", "body changed", "sha1", "truncated", "none", "garbage"]))
    if how == "other secret":
        headers["X-Hub-Signature-256"] = payloads.sign(body, uuid.uuid4().hex)
    elif how == "body changed":
        body = body[:-1] + b" }"
    elif how == "sha1":
        headers["X-Hub-Signature-256"] = "sha1=" + headers["X-Hub-Signature-256"][7:47]
    elif how == "truncated":
        headers["X-Hub-Signature-256"] = headers["X-Hub-Signature-256"][:-1]
    elif how == "none":
        del headers["X-Hub-Signature-256"]
    else:
        headers["X-Hub-Signature-256"] = "sha256=" + draw(st.text("0123456789abcdefxyz=", max_size=70))
    return FuzzDelivery(delivery.event, body, headers, (*delivery.changes, f"signature: {how}"))
