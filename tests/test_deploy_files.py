"""The deployment files agree with the code: the App manifest, the compose file, the Dockerfile.

The App's permissions are derived here from the code itself: every GitHub REST call in bot/,
handlers/ and runner/ is found in the source, resolved to its operation in GitHub's own OpenAPI
description, and looked up in a table of the permission GitHub documents for it. A new call
without a table entry fails the test, and so does a manifest that grants more or less than the
calls and events need.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakegithub.spec import rest_spec

from bot.service.settings import Settings
from bot.service.store.sqlite import SQLiteStore
from bot.service.web import create_web_app
from handlers.routing import router

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
MANIFEST = DEPLOY / "app-manifest.yml"
COMPOSE = DEPLOY / "docker-compose.yml"
DEPLOY_README = DEPLOY / "README.md"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
CHECK_SCRIPT = ROOT / "scripts" / "check-deploy.sh"
SOURCE_PACKAGES = ("bot", "handlers", "runner")

LEVELS = {"read": 1, "write": 2}
Grant = tuple[str, str]  # (permission, level)
# A requirement is a list of alternatives; each alternative is a set of grants that together suffice.
Requirement = list[frozenset[Grant]]


def need(*alternatives: dict[str, str]) -> Requirement:
    return [frozenset(alt.items()) for alt in alternatives]


# GitHub's documented fine-grained permission for each REST operation the bot calls, keyed by the
# operation id in GitHub's OpenAPI description. Comments on a PR go through the Issues API, which
# GitHub authorizes with either the Issues or the Pull requests permission.
OPERATION_PERMISSIONS: dict[str, Requirement] = {
    "apps/get-authenticated": [],  # the App's JWT, no installation permission
    "apps/create-installation-access-token": [],  # the App's JWT: a clone token for an agent
    "checks/create": need({"checks": "write"}),
    "checks/update": need({"checks": "write"}),
    "issues/create-comment": need({"issues": "write"}, {"pull_requests": "write"}),
    "issues/update-comment": need({"issues": "write"}, {"pull_requests": "write"}),
    "issues/delete-comment": need({"issues": "write"}, {"pull_requests": "write"}),
    "issues/list-comments": need({"issues": "read"}, {"pull_requests": "read"}),
    "reactions/create-for-issue-comment": need({"issues": "write"}, {"pull_requests": "write"}),
    "pulls/get": need({"pull_requests": "read"}),
    "repos/list-pull-requests-associated-with-commit": need({"contents": "read", "pull_requests": "read"}),
    "repos/get-content": need({"contents": "read"}),
    "repos/get-collaborator-permission-level": need({"metadata": "read"}),
    "teams/get-membership-for-user-in-org": need({"members": "read"}),
    "apps/get-repo-installation": [],  # the App's JWT: is a repository's run page public?
    "repos/get": need({"metadata": "read"}),  # its visibility; a viewer's own token: their access
    "users/get-authenticated": [],  # a viewer's own token: who signed in
    "apps/create-from-manifest": [],  # no credential: the set-up page registering the App
}

# The permission an App needs to be sent each event. check_run's `rerequested` action goes only to
# Apps with write access to checks.
EVENT_PERMISSIONS: dict[str, Requirement] = {
    "check_run": need({"checks": "write"}),
    "issue_comment": need({"issues": "read"}),
    "pull_request": need({"pull_requests": "read"}),
    "push": need({"contents": "read"}),
}
# Sent to every App; GitHub does not accept them as subscriptions.
ALWAYS_DELIVERED = {"installation", "installation_repositories"}

# Not REST: runs fetch the PR's commits with git over HTTPS, authenticated with the installation token.
GIT_FETCH = need({"contents": "read"})
EVERY_APP = need({"metadata": "read"})

_METHODS = {
    "getitem": "GET",
    "getiter": "GET",
    "post": "POST",
    "patch": "PATCH",
    "put": "PUT",
    "delete": "DELETE",
}


@dataclass(frozen=True)
class ApiCall:
    method: str
    template: str  # placeholders as {}, no query
    where: str  # file:line

    def sample_path(self) -> str:
        """A concrete path for the template: a repository where /repos/ wants one, else 1."""
        path = self.template.replace("/repos/{}", "/repos/octo-org/octo-repo", 1)
        return path.replace("{}", "1")


def _template(node: ast.expr) -> str | None:
    """The literal text of a path argument, each interpolated value as {}; None if not a path."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.JoinedStr):
        text = "".join(
            part.value if isinstance(part, ast.Constant) and isinstance(part.value, str) else "{}"
            for part in node.values
        )
    else:
        return None
    if not text.startswith("/"):
        return None
    text = re.sub(r"\{\?[^}]*\}", "", text).split("?", 1)[0]  # URI-template and plain queries
    return re.sub(r"\{[^}]*\}", "{}", text)


def api_calls() -> list[ApiCall]:
    """Every gidgethub-style call (``x.getitem("/path")`` ...) in the service's packages."""
    calls = []
    for package in SOURCE_PACKAGES:
        for file in sorted((ROOT / package).rglob("*.py")):
            if "demo" in file.relative_to(ROOT).parts:
                continue  # the demo project is data, not the service
            tree = ast.parse(file.read_text(), str(file))
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args):
                    continue
                method = _METHODS.get(node.func.attr)
                template = _template(node.args[0]) if method else None
                if method and template:
                    where = f"{file.relative_to(ROOT)}:{node.lineno}"
                    calls.append(ApiCall(method, template, where))
    return calls


def operation_id(call: ApiCall) -> str:
    found, _ = rest_spec().match(call.method, call.sample_path())
    assert found is not None, f"{call.where}: {call.method} {call.template} is not in GitHub's REST API"
    return found.operation.operation_id


def handled_events() -> set[str]:
    return set(router._shallow_routes) | set(router._deep_routes)


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def granted(manifest: dict[str, Any]) -> set[Grant]:
    return set(manifest["default_permissions"].items())


def satisfied(requirement: Requirement, grants: set[Grant]) -> bool:
    if not requirement:
        return True
    level = {perm: LEVELS[lvl] for perm, lvl in grants}
    return any(all(level.get(p, 0) >= LEVELS[lvl] for p, lvl in alt) for alt in requirement)


def all_requirements(manifest: dict[str, Any]) -> dict[str, Requirement]:
    reqs = {
        f"{c.method} {c.template} ({c.where})": OPERATION_PERMISSIONS[operation_id(c)] for c in api_calls()
    }
    reqs |= {f"event {e}": EVENT_PERMISSIONS[e] for e in manifest["default_events"]}
    reqs["git fetch with the installation token"] = GIT_FETCH
    reqs["every GitHub App"] = EVERY_APP
    return reqs


# --- the manifest -------------------------------------------------------------------------------


def test_the_code_calls_the_endpoints_the_permission_table_knows() -> None:
    calls = api_calls()
    # The scan must see the calls we know exist, or the derivation below proves nothing.
    seen = {operation_id(c) for c in calls}
    assert {"checks/create", "issues/create-comment", "repos/get-content", "pulls/get"} <= seen
    unknown = sorted(
        f"{c.where}: {c.method} {c.template}" for c in calls if operation_id(c) not in OPERATION_PERMISSIONS
    )
    assert not unknown, (
        "add the documented permission of these calls to OPERATION_PERMISSIONS:\n" + "\n".join(unknown)
    )


def test_git_fetches_use_the_installation_token() -> None:
    # GIT_FETCH above assumes this; if runs stopped authenticating git, contents: read might go.
    assert "x-access-token" in (ROOT / "runner" / "workspace.py").read_text()


def test_manifest_grants_every_permission_the_code_and_events_need() -> None:
    manifest = load_yaml(MANIFEST)
    grants = granted(manifest)
    missing = [what for what, req in all_requirements(manifest).items() if not satisfied(req, grants)]
    assert not missing, f"deploy/app-manifest.yml lacks a permission for: {missing}"


def test_manifest_grants_nothing_more_than_needed() -> None:
    manifest = load_yaml(MANIFEST)
    grants = granted(manifest)
    reqs = all_requirements(manifest)
    for perm, level in sorted(grants):
        without = grants - {(perm, level)}
        lowered = without | {(perm, "read")} if level == "write" else without
        assert not all(satisfied(r, without) for r in reqs.values()), (
            f"{perm}: not needed by any call or event"
        )
        if level == "write":
            assert not all(satisfied(r, lowered) for r in reqs.values()), f"{perm}: read would do"


def test_manifest_subscribes_to_exactly_the_handled_events() -> None:
    manifest = load_yaml(MANIFEST)
    subscribed = set(manifest["default_events"])
    assert not subscribed & ALWAYS_DELIVERED, "installation events cannot be subscribed to"
    assert subscribed | (handled_events() & ALWAYS_DELIVERED) == handled_events()


def test_manifest_permission_levels_are_ones_github_accepts() -> None:
    manifest = load_yaml(MANIFEST)
    assert set(manifest["default_permissions"].values()) <= set(LEVELS)
    assert (
        manifest["public"] is False
    )  # a runner executes contributors' code: installs are the admin's choice


async def test_manifest_webhook_url_is_the_services_webhook_route(tmp_path: Path) -> None:
    manifest = load_yaml(MANIFEST)
    hook = manifest["hook_attributes"]["url"]
    assert hook.startswith("https://"), "GitHub delivers App webhooks over HTTPS"
    app = create_web_app("secret", SQLiteStore(tmp_path / "bot.db"))
    posts = {r.resource.canonical for r in app.router.routes() if r.method == "POST" and r.resource}
    assert "/" + hook.split("://", 1)[1].split("/", 1)[1] in posts


# --- the compose file ---------------------------------------------------------------------------

SETTING_NAMES = {f"PARITYBOT_{name.upper()}" for name in Settings.model_fields}
_INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(?:(:?[-?])([^}]*))?\}")


def compose_service() -> dict[str, Any]:
    services = load_yaml(COMPOSE)["services"]
    assert list(services) == ["paritybot"]
    return services["paritybot"]


def interpolated(value: str) -> dict[str, tuple[str, str]]:
    """``${NAME:-default}`` / ``${NAME:?message}`` occurrences: name -> (operator, argument)."""
    return {m.group(1): (m.group(2) or "", m.group(3) or "") for m in _INTERPOLATION.finditer(value)}


def test_compose_builds_this_repositorys_dockerfile() -> None:
    build = compose_service()["build"]
    context = (DEPLOY / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).resolve() == DOCKERFILE
    assert "BASE_IMAGE" in build["args"]


def test_compose_environment_names_only_real_settings() -> None:
    env = compose_service()["environment"]
    assert set(env) <= SETTING_NAMES, f"not settings: {set(env) - SETTING_NAMES}"
    # The service refuses to start without it; compose must refuse first, naming it.
    assert interpolated(env["PARITYBOT_APP_ID"]).get("PARITYBOT_APP_ID", ("",))[0] == ":?"


def secret_settings_point_at_required_mounted_secrets(path: Path, service: str) -> set[str]:
    """The service's *_PATH / *_FILE settings name files of its compose secrets, each required.

    Returns the names of the secrets it mounts."""
    doc = load_yaml(path)
    spec = doc["services"][service]
    mounted = set(spec.get("secrets", []))
    for name, value in spec["environment"].items():
        if name.endswith(("_PATH", "_FILE")) and value.startswith("/run/secrets/"):
            secret = value.removeprefix("/run/secrets/")
            assert secret in mounted, f"{path.name}: {name} names {secret}, not mounted in {service}"
    for secret in mounted:
        (var,) = interpolated(doc["secrets"][secret]["file"]).items()
        assert var[1][0] == ":?", f"{path.name}: the file of {secret} must be required"
    return mounted


def test_compose_secrets_are_files_never_environment_values() -> None:
    mounted = secret_settings_point_at_required_mounted_secrets(COMPOSE, "paritybot")
    assert mounted == {"paritybot_private_key", "paritybot_webhook_secret"}
    env = compose_service()["environment"]
    # In the environment, a secret would show in `docker inspect` and in every child's /proc.
    assert not {"PARITYBOT_WEBHOOK_SECRET", "PARITYBOT_PRIVATE_KEY"} & set(env)


def test_compose_mounts_the_engine_socket_and_a_data_volume() -> None:
    service = compose_service()
    # SOURCE:TARGET[:MODE], where SOURCE may itself be ${VAR:-default}.
    targets = {re.sub(r"\$\{[^}]*\}", "X", v).split(":")[1]: v for v in service["volumes"]}
    assert "/var/run/docker.sock" in targets
    data_dir = str(Path(dockerfile_env()["PARITYBOT_DATABASE_URL"].removeprefix("sqlite:///")).parent)
    assert data_dir in targets, "the database must live on a volume"
    volume = targets[data_dir].split(":", 1)[0]
    assert volume in load_yaml(COMPOSE)["volumes"]
    # Non-root with the socket: the socket's group is added, nothing is privileged.
    assert service["group_add"] and "user" not in service
    assert not service.get("privileged")
    assert service["cap_drop"] == ["ALL"]


def test_compose_publishes_and_probes_the_services_port() -> None:
    service = compose_service()
    port = str(Settings.model_fields["port"].default)
    assert all(p.endswith(f":{port}") for p in service["ports"])
    probe = " ".join(service["healthcheck"]["test"])
    assert f"127.0.0.1:{port}/healthz" in probe and "curl" not in probe


@functools.cache
def compose_command() -> list[str] | None:
    for cmd in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(cmd[0]) and subprocess.run([*cmd, "version"], capture_output=True).returncode == 0:
            return cmd
    return None


@pytest.fixture
def compose_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    key = tmp_path / "key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PARITYBOT_", "DOCKER_GID", "COMPOSE_"))}
    secret = tmp_path / "webhook-secret"
    secret.write_text("s3cret\n")
    env |= {
        "PARITYBOT_APP_ID": "1",
        "PARITYBOT_WEBHOOK_SECRET_FILE": str(secret),
        "PARITYBOT_PRIVATE_KEY_FILE": str(key),
        "DOCKER_GID": "999",
    }
    yield env


def test_compose_config_is_accepted_by_compose(compose_env: dict[str, str], tmp_path: Path) -> None:
    cmd = compose_command()
    if cmd is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    # An empty env file: a deploy/.env an admin left in the checkout must not leak in.
    (tmp_path / "empty.env").write_text("")
    args = [*cmd, "--env-file", str(tmp_path / "empty.env"), "-f", str(COMPOSE), "config"]
    ok = subprocess.run(args, env=compose_env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    rendered = yaml.safe_load(ok.stdout)
    assert (
        rendered["secrets"]["paritybot_webhook_secret"]["file"]
        == compose_env["PARITYBOT_WEBHOOK_SECRET_FILE"]
    )
    assert "s3cret" not in ok.stdout, "the secret's value must not be in the rendered configuration"
    del compose_env["PARITYBOT_WEBHOOK_SECRET_FILE"]
    refused = subprocess.run(args, env=compose_env, capture_output=True, text=True)
    assert refused.returncode != 0
    assert "set PARITYBOT_WEBHOOK_SECRET_FILE" in refused.stderr
    # An .env from before 0.2.0 holds the value instead: the refusal says where the fix is.
    assert (
        "PARITYBOT_WEBHOOK_SECRET value from before 0.2.0 moves to that file, see CHANGELOG.md"
        in refused.stderr
    )


# --- the Dockerfile -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int  # index of the FROM it follows; -1 before the first


def dockerfile() -> list[Instruction]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())  # join continuation lines
    out, stage = [], -1
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        if keyword.upper() == "FROM":
            stage += 1
        out.append(Instruction(keyword.upper(), args.strip(), stage))
    return out


def final_stage() -> list[Instruction]:
    instructions = dockerfile()
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for ins in final_stage():
        if ins.keyword == "ENV":
            env |= dict(re.findall(r"([A-Z_][A-Z0-9_]*)=(\S+)", ins.args))
    return env


def test_dockerfile_base_image_is_an_argument_defaulting_to_python_slim() -> None:
    instructions = dockerfile()
    assert Instruction("ARG", "BASE_IMAGE=python:3.12-slim", -1) in instructions
    froms = [i.args.split()[0] for i in instructions if i.keyword == "FROM"]
    assert len(froms) >= 2, "build and runtime are separate stages"
    # Every stage on the same base: the venv copied across must find the same interpreter.
    assert set(froms) == {"${BASE_IMAGE}"}


def test_dockerfile_runtime_runs_paritybot_serve_as_a_non_root_user() -> None:
    stage = final_stage()
    users = [i.args for i in stage if i.keyword == "USER"]
    assert users and users[-1] not in {"root", "0"} and not users[-1].startswith(("root:", "0:"))
    assert [i.args for i in stage if i.keyword == "ENTRYPOINT"] == ['["paritybot"]']
    assert [i.args for i in stage if i.keyword == "CMD"] == ['["serve"]']
    assert any(i.keyword == "RUN" and "git" in i.args for i in stage), "the pipeline clones with git"


def test_dockerfile_healthcheck_uses_python_not_curl() -> None:
    (check,) = [i.args for i in final_stage() if i.keyword == "HEALTHCHECK"]
    assert "/healthz" in check and "urllib" in check
    assert "curl" not in check and "wget" not in check


def test_dockerfile_settings_are_real_and_agree_with_the_port() -> None:
    env = dockerfile_env()
    settings = {k for k in env if k.startswith("PARITYBOT_")}
    assert settings <= SETTING_NAMES, f"not settings: {settings - SETTING_NAMES}"
    Settings.model_validate(
        {k.removeprefix("PARITYBOT_").lower(): v for k, v in env.items() if k in settings}
    )
    exposed = [i.args for i in final_stage() if i.keyword == "EXPOSE"]
    assert exposed == [env["PARITYBOT_PORT"]]
    data = Path(env["PARITYBOT_DATABASE_URL"].removeprefix("sqlite:///")).parent
    volumes = [i.args for i in final_stage() if i.keyword == "VOLUME"]
    assert volumes == [f'["{data}"]']
    for name in ("PARITYBOT_WORKSPACE_ROOT", "PARITYBOT_CACHE_ROOT"):
        assert Path(env[name]).is_relative_to(data), f"{name} must be on the data volume"


# --- the build context --------------------------------------------------------------------------


def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(exclude?, regex) per line, in Docker's semantics: later lines win, `**` spans directories."""
    rules = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                regex, i = regex + pattern[i : end + 1], end + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        rules.append((not negated, re.compile(regex + r"\Z")))
    return rules


def in_context(path: str) -> bool:
    """Whether Docker sends ``path`` (relative to the repository) with the build context."""
    excluded = False
    parts = path.split("/")
    for exclude, regex in dockerignore_rules():
        # A pattern matching a parent directory applies to everything under it.
        if any(regex.match("/".join(parts[: n + 1])) for n in range(len(parts))):
            excluded = exclude
    return not excluded


def test_build_context_holds_what_the_dockerfile_copies() -> None:
    sources = []
    for ins in dockerfile():
        if ins.keyword == "COPY" and "--from=" not in ins.args:
            sources += ins.args.split()[:-1]
    assert sources, "the Dockerfile copies the package sources"
    for source in sources:
        assert (ROOT / source).exists(), source
        assert in_context(source), f"{source} is excluded by .dockerignore"
    tracked = subprocess.run(
        ["git", "ls-files", *SOURCE_PACKAGES], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked
    left_out = [f for f in tracked if not in_context(f)]
    assert not left_out, f"package files missing from the build context: {left_out[:5]}"


@pytest.mark.parametrize(
    "path",
    [
        ".git/config",
        ".venv/bin/python",
        "tests/test_deploy_files.py",
        "deploy/.env",
        "app.private-key.pem",
        "bot/leftover.pem",
        "bot/__pycache__/app.cpython-311.pyc",
        "paritybot.db",
        "handlers/paritybot.db-wal",
    ],
)
def test_build_context_leaves_out_secrets_caches_and_unrelated_files(path: str) -> None:
    assert not in_context(path)


# --- the docs and the check script ---------------------------------------------------------------


COMPOSE_FILES = sorted(DEPLOY.glob("docker-compose*.yml"))


def test_readme_names_only_real_settings_and_compose_variables() -> None:
    text = DEPLOY_README.read_text()
    compose_vars = {name for path in COMPOSE_FILES for name in interpolated(path.read_text())}
    mentioned = set(re.findall(r"\bPARITYBOT_[A-Z0-9_]+\b", text))
    # The variables the scripts the guide runs read (scripts/build-base-image.sh's mirror, …).
    script_vars = {
        v
        for f in (ROOT / "scripts").glob("*.sh")
        for v in re.findall(r"\$\{(PARITYBOT_[A-Z0-9_]+)", f.read_text())
    }
    unknown = mentioned - SETTING_NAMES - compose_vars - script_vars
    assert not unknown, f"deploy/README.md names unknown variables: {sorted(unknown)}"
    # Every variable of every compose file, required or not: the operator sets them in .env.
    undocumented = compose_vars - set(re.findall(r"\b[A-Z][A-Z0-9_]+\b", text))
    assert not undocumented, f"deploy/README.md does not explain {sorted(undocumented)}"


def test_check_script_is_valid_bash() -> None:
    assert os.access(CHECK_SCRIPT, os.X_OK)
    result = subprocess.run(["bash", "-n", str(CHECK_SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
