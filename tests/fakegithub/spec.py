"""GitHub's REST OpenAPI description as a request checker: route matching and body/query validation.

The description (npm ``@octokit/openapi`` 23.0.2) is loaded and indexed once per process (see
:func:`rest_spec`), because loading it costs most of a second and every test starts a fake.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from jsonschema.exceptions import ValidationError
from openapi_schema_validator import OAS30ReadValidator, OAS30WriteValidator, oas30_format_checker
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "github"
SPEC_FILE = FIXTURES / "api.github.com.json.gz"
_SPEC_URI = "urn:github-rest-openapi"
_METHODS = ("get", "post", "put", "patch", "delete", "head")

# Limits GitHub enforces that its description does not state.
MAX_PER_PAGE = 100
MAX_COMMENT_BODY = 65_536
_COMMENT_OPERATIONS = frozenset({"issues/create-comment", "issues/update-comment"})
_CHECK_RUN_OPERATIONS = frozenset({"checks/create", "checks/update"})


@dataclass(frozen=True)
class Operation:
    """One (method, path template) of the description."""

    operation_id: str
    method: str
    template: str
    pattern: re.Pattern[str]
    path_params: dict[str, dict[str, Any]]
    query_params: dict[str, dict[str, Any]]
    body_pointer: str | None
    body_required: bool
    literal_segments: int = field(default=0)


@dataclass(frozen=True)
class Match:
    operation: Operation
    params: dict[str, str]


def _escape(segment: str) -> str:
    """JSON-pointer escaping of one key."""
    return segment.replace("~", "~0").replace("/", "~1")


def _template_regex(template: str) -> re.Pattern[str]:
    # `{path}` (contents API) spans slashes; every other parameter is one segment. The match runs
    # on the raw (still percent-encoded) path so an encoded slash stays inside its parameter.
    out = ""
    for part in re.split(r"(\{[^}]+\})", template):
        if part.startswith("{"):
            name = part[1:-1]
            out += f"(?P<{name.replace('-', '_')}>{'.+' if name == 'path' else '[^/]+'})"
        else:
            out += re.escape(part)
    return re.compile(f"^{out}/?$")


def _allow_null_in_nullable_enums(node: Any) -> None:
    """The description marks some enums ``nullable`` without listing null (check-run.conclusion);
    GitHub sends and accepts null there, so the enum must too."""
    if isinstance(node, dict):
        if node.get("nullable") is True and isinstance(node.get("enum"), list) and None not in node["enum"]:
            node["enum"].append(None)
        for value in node.values():
            _allow_null_in_nullable_enums(value)
    elif isinstance(node, list):
        for value in node:
            _allow_null_in_nullable_enums(value)


def _error_text(error: ValidationError) -> str:
    where = "/".join(str(p) for p in error.absolute_path) or "<body>"
    message = error.message if len(error.message) <= 300 else error.message[:300] + "…"
    return f"{where}: {message}"


class RestSpec:
    """Matches requests to operations and validates them the way GitHub would."""

    def __init__(self, document: dict[str, Any]) -> None:
        _allow_null_in_nullable_enums(document)
        self.document = document
        resource = Resource.from_contents(document, default_specification=DRAFT4)
        self.registry: Registry[Any] = Registry().with_resource(_SPEC_URI, resource)
        self.operations: list[Operation] = []
        self.by_id: dict[str, Operation] = {}
        for template, item in document["paths"].items():
            for method in _METHODS:
                if method in item:
                    op = self._operation(template, method, item)
                    self.operations.append(op)
                    self.by_id[op.operation_id] = op
        # Most literal segments first, so `/issues/comments/{id}` wins over `/issues/{number}/...`.
        self.operations.sort(key=lambda o: (-o.literal_segments, o.template))

    def _resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = self.registry.resolver().lookup(_SPEC_URI + node["$ref"]).contents
        return node

    def _operation(self, template: str, method: str, item: dict[str, Any]) -> Operation:
        op = item[method]
        params = [self._resolve(p) for p in [*item.get("parameters", []), *op.get("parameters", [])]]
        body_pointer = None
        body_required = False
        if "requestBody" in op:
            body = self._resolve(op["requestBody"])
            body_required = bool(body.get("required", False))
            if "application/json" in body.get("content", {}):
                body_pointer = (
                    f"#/paths/{_escape(template)}/{method}/requestBody/content/application~1json/schema"
                )
        literal = sum(1 for s in template.split("/") if s and not s.startswith("{"))
        return Operation(
            operation_id=op["operationId"],
            method=method.upper(),
            template=template,
            pattern=_template_regex(template),
            path_params={p["name"]: p.get("schema", {}) for p in params if p["in"] == "path"},
            query_params={p["name"]: p.get("schema", {}) for p in params if p["in"] == "query"},
            body_pointer=body_pointer,
            body_required=body_required,
            literal_segments=literal,
        )

    def match(self, method: str, raw_path: str) -> tuple[Match | None, bool]:
        """The operation for ``method raw_path``; second item: whether the path exists at all."""
        path_known = False
        for op in self.operations:
            found = op.pattern.match(raw_path)
            if found is None:
                continue
            params = {name: unquote(found.group(name.replace("-", "_"))) for name in op.path_params}
            if not all(self._path_param_ok(op.path_params[n], v) for n, v in params.items()):
                continue
            path_known = True
            if op.method == method.upper():
                return Match(op, params), True
        return None, path_known

    @staticmethod
    def _path_param_ok(schema: dict[str, Any], value: str) -> bool:
        return schema.get("type") != "integer" or re.fullmatch(r"-?\d+", value) is not None

    def query_errors(self, op: Operation, query: dict[str, list[str]]) -> list[str]:
        errors = []
        for name, values in query.items():
            schema = op.query_params.get(name)
            if schema is None:
                errors.append(f"query parameter {name!r} is not accepted by {op.operation_id}")
                continue
            if schema.get("type") != "array" and len(values) > 1:
                errors.append(f"query parameter {name!r} given {len(values)} times")
            errors.extend(self._query_value_errors(name, schema, values[-1]))
        return errors

    def _query_value_errors(self, name: str, schema: dict[str, Any], raw: str) -> list[str]:
        schema = self._resolve(schema)
        kind = schema.get("type")
        value: Any = raw
        if kind == "integer":
            if re.fullmatch(r"-?\d+", raw) is None:
                return [f"query parameter {name!r}={raw!r} is not an integer"]
            value = int(raw)
            if name == "per_page" and not 1 <= value <= MAX_PER_PAGE:
                return [f"per_page={value} is outside 1..{MAX_PER_PAGE}"]
            if name == "page" and value < 1:
                return [f"page={value} must be 1 or more"]
        elif kind == "boolean":
            if raw not in ("true", "false"):
                return [f"query parameter {name!r}={raw!r} is not a boolean"]
            value = raw == "true"
        validator = OAS30ReadValidator(schema, format_checker=oas30_format_checker)
        return [f"query parameter {name!r}: {e.message}" for e in validator.iter_errors(value)]

    def body_errors(self, op: Operation, body: Any, present: bool) -> list[str]:
        if not present:
            return [f"{op.operation_id} requires a JSON body"] if op.body_required else []
        if op.body_pointer is None:
            return [f"{op.operation_id} takes no JSON body"]
        validator = OAS30WriteValidator(
            {"$ref": _SPEC_URI + op.body_pointer},
            registry=self.registry,
            format_checker=oas30_format_checker,
        )
        errors = [_error_text(e) for e in validator.iter_errors(body)]
        return errors + _unstated_limits(op.operation_id, body)

    def response_errors(self, operation_id: str, status: int, body: Any) -> list[str]:
        """Where a response body departs from the documented schema (advice for the fake's own tests)."""
        op = self.by_id[operation_id]
        responses = self.document["paths"][op.template][op.method.lower()]["responses"]
        response = responses[str(status)]
        if "$ref" in response:
            pointer = f"#/components/responses/{response['$ref'].rsplit('/', 1)[-1]}"
        else:
            pointer = f"#/paths/{_escape(op.template)}/{op.method.lower()}/responses/{status}"
        validator = OAS30ReadValidator(
            {"$ref": f"{_SPEC_URI}{pointer}/content/application~1json/schema"},
            registry=self.registry,
            format_checker=oas30_format_checker,
        )
        return [_error_text(e) for e in validator.iter_errors(body)]


def _unstated_limits(operation_id: str, body: Any) -> list[str]:
    """Rules GitHub enforces that the description leaves out."""
    if not isinstance(body, dict):
        return []
    errors = []
    if operation_id in _COMMENT_OPERATIONS:
        text = body.get("body")
        if isinstance(text, str) and len(text) > MAX_COMMENT_BODY:
            errors.append(f"body: is too long (maximum is {MAX_COMMENT_BODY} characters, got {len(text)})")
    if operation_id in _CHECK_RUN_OPERATIONS:
        finishing = body.get("status") == "completed" or "completed_at" in body
        if finishing and body.get("conclusion") is None:
            errors.append("conclusion: is required when status is completed or completed_at is given")
    return errors


@functools.cache
def rest_spec() -> RestSpec:
    """The one parsed description for this process."""
    with gzip.open(SPEC_FILE, "rt", encoding="utf-8") as fh:
        return RestSpec(json.load(fh))
