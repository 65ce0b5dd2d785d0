"""The compose files for many GPU hosts: a control host (PostgreSQL, migration, serve) and agents.

The guarantee they carry: the App's key and webhook secret exist on the control host only, in
`serve` only; an agent host's file cannot even be given them. Every secret is a mounted file.
Compose itself renders each file (and both merged, for one machine that plays both parts) the way
the guide runs it, when a compose tool is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from docker_support import unavailable
from test_deploy_files import (
    COMPOSE,
    COMPOSE_FILES,
    DEPLOY,
    DOCKERFILE,
    ROOT,
    SETTING_NAMES,
    compose_command,
    dockerfile,
    interpolated,
    load_yaml,
    secret_settings_point_at_required_mounted_secrets,
)

CONTROL = DEPLOY / "docker-compose.control.yml"
AGENT = DEPLOY / "docker-compose.agent.yml"
INIT_ROLES = DEPLOY / "postgres" / "init-roles.sh"
APP_SECRETS = {
    "PARITYBOT_APP_ID",
    "PARITYBOT_PRIVATE_KEY",
    "PARITYBOT_PRIVATE_KEY_PATH",
    "PARITYBOT_WEBHOOK_SECRET",
}
APP_SECRETS |= {"PARITYBOT_WEBHOOK_SECRET_FILE", "PARITYBOT_PRIVATE_KEY_FILE"}
BUILD_ARGS = {"BASE_IMAGE", "PIP_INDEX_URL", "EXTRA_CA_CERTS"}


def services(path: Path) -> dict[str, Any]:
    return load_yaml(path)["services"]


def test_the_control_host_runs_postgres_the_migration_then_serve() -> None:
    svc = services(CONTROL)
    assert set(svc) == {"postgres", "db-upgrade", "serve"}
    assert svc["db-upgrade"]["command"] == ["db", "upgrade"]
    assert svc["serve"]["command"] == ["serve"]
    # serve starts on a migrated database; the migration on a database that answers.
    assert svc["serve"]["depends_on"] == {"db-upgrade": {"condition": "service_completed_successfully"}}
    assert svc["db-upgrade"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert svc["db-upgrade"]["restart"] == "no"


def test_serve_on_the_control_host_has_no_container_engine() -> None:
    serve = services(CONTROL)["serve"]
    mounts = [v for v in serve.get("volumes", []) if "docker.sock" in v]
    assert not mounts and "group_add" not in serve, "serve runs nothing: no engine socket"


def test_an_agent_host_has_nothing_of_the_app() -> None:
    text = AGENT.read_text()
    named = {name for name in interpolated(text)} | set(services(AGENT)["agent"]["environment"])
    assert not named & APP_SECRETS, sorted(named & APP_SECRETS)
    assert set(load_yaml(AGENT)["secrets"]) == {"paritybot_db_agent_password"}
    mounted = secret_settings_point_at_required_mounted_secrets(AGENT, "agent")
    assert mounted == {"paritybot_db_agent_password"}


def test_the_agents_connect_as_their_own_database_role_with_a_password_file() -> None:
    roles = {}
    for path, name in [(CONTROL, "db-upgrade"), (CONTROL, "serve"), (AGENT, "agent")]:
        env = services(path)[name]["environment"]
        url = env["PARITYBOT_DATABASE_URL"]
        # The agent's URL is the operator's (another host); its default names the role to use.
        message = interpolated(url).get("PARITYBOT_AGENT_DATABASE_URL", ("", ""))[1]
        roles[name] = (message or url).split("postgresql://", 1)[1].split("@", 1)[0]
        assert ":" not in roles[name], f"{name}: a password in the URL shows in docker inspect"
        secret = env["PARITYBOT_DATABASE_PASSWORD_FILE"].removeprefix("/run/secrets/")
        assert secret in services(path)[name]["secrets"]
    # serve migrates at start-up too, so it connects as the schema's owner; the agents never do.
    assert roles == {"db-upgrade": "paritybot", "serve": "paritybot", "agent": "paritybot_agent"}
    assert services(CONTROL)["postgres"]["environment"]["POSTGRES_USER"] == roles["db-upgrade"]
    assert "CREATE ROLE paritybot_agent LOGIN" in INIT_ROLES.read_text()


def test_the_app_secrets_are_mounted_in_serve_alone() -> None:
    svc = services(CONTROL)
    assert secret_settings_point_at_required_mounted_secrets(CONTROL, "serve") == {
        "paritybot_private_key",
        "paritybot_webhook_secret",
        "paritybot_db_owner_password",
    }
    for name in ("postgres", "db-upgrade"):
        assert not {"paritybot_private_key", "paritybot_webhook_secret"} & set(svc[name]["secrets"]), name


def test_every_setting_is_real_and_no_secret_is_an_environment_value() -> None:
    for path in COMPOSE_FILES:
        for name, spec in services(path).items():
            env = set(spec.get("environment", {}))
            if name != "postgres":
                assert env <= SETTING_NAMES, f"{path.name} {name}: {sorted(env - SETTING_NAMES)}"
            assert not {"PARITYBOT_WEBHOOK_SECRET", "PARITYBOT_PRIVATE_KEY", "POSTGRES_PASSWORD"} & env


def test_the_agent_gets_the_hosts_gpus_and_engine() -> None:
    agent = services(AGENT)["agent"]
    (device,) = agent["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
    assert any(v.endswith(":/var/run/docker.sock") for v in agent["volumes"])
    assert agent["group_add"] and agent["read_only"] is True and agent["cap_drop"] == ["ALL"]
    assert agent["command"][:2] == ["agent", "--labels"]
    # The image's health check asks serve's /healthz, which an agent does not serve.
    assert agent["healthcheck"] == {"disable": True}


def test_every_build_passes_the_base_the_index_and_the_cas_the_dockerfile_takes() -> None:
    declared = {i.args.split("=", 1)[0] for i in dockerfile() if i.keyword == "ARG" and i.stage in (-1, 0)}
    assert declared >= BUILD_ARGS
    for path in COMPOSE_FILES:
        for name, spec in services(path).items():
            if "build" in spec:
                assert (path.parent / spec["build"]["context"]).resolve() == ROOT
                assert (ROOT / spec["build"]["dockerfile"]).resolve() == DOCKERFILE
                assert set(spec["build"]["args"]) == BUILD_ARGS, f"{path.name} {name}"


# --- compose itself ------------------------------------------------------------------------------


def secret_files(tmp_path: Path) -> dict[str, str]:
    files = {}
    for var in (
        "PARITYBOT_PRIVATE_KEY_FILE",
        "PARITYBOT_WEBHOOK_SECRET_FILE",
        "PARITYBOT_DB_OWNER_PASSWORD_FILE",
        "PARITYBOT_DB_AGENT_PASSWORD_FILE",
    ):
        path = tmp_path / var.lower()
        path.write_text(f"value-of-{var}\n")
        files[var] = str(path)
    return files


@pytest.fixture
def compose(tmp_path: Path) -> list[str]:
    cmd = compose_command()
    if cmd is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    # An empty env file: a deploy/.env an admin left in the checkout must not leak in.
    (tmp_path / "empty.env").write_text("")
    return [*cmd, "--env-file", str(tmp_path / "empty.env")]


def render(compose: list[str], env: dict[str, str], *files: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PARITYBOT_", "DOCKER_GID", "COMPOSE_"))}
    args = [*compose, *(a for f in files for a in ("-f", str(f))), "config"]
    return subprocess.run(args, env=base | env, capture_output=True, text=True)


CONTROL_ENV = {"PARITYBOT_APP_ID": "1"}
AGENT_ENV = {
    "PARITYBOT_AGENT_LABELS": "cuda12.1,h100",
    "PARITYBOT_AGENT_NAME": "gpu-a",
    "PARITYBOT_AGENT_DATABASE_URL": "postgresql://paritybot_agent@control.example.org:5432/paritybot",
    "DOCKER_GID": "998",
}


def test_compose_renders_the_control_host_and_the_agent_host_apart(
    compose: list[str], tmp_path: Path
) -> None:
    files = secret_files(tmp_path)
    control = render(compose, CONTROL_ENV | files, CONTROL)
    assert control.returncode == 0, control.stderr
    agent_files = {"PARITYBOT_DB_AGENT_PASSWORD_FILE": files["PARITYBOT_DB_AGENT_PASSWORD_FILE"]}
    # An agent host is configured without any of the App's settings.
    agent = render(compose, AGENT_ENV | agent_files, AGENT)
    assert agent.returncode == 0, agent.stderr
    rendered = yaml.safe_load(agent.stdout)["services"]["agent"]
    assert rendered["command"] == ["agent", "--labels", "cuda12.1,h100", "--name", "gpu-a"]
    assert rendered["hostname"] == "gpu-a"
    for out in (control.stdout, agent.stdout):
        assert "value-of-" not in out, "a secret's value is in the rendered configuration"


def test_compose_renders_both_parts_merged_for_one_machine(compose: list[str], tmp_path: Path) -> None:
    done = render(compose, CONTROL_ENV | AGENT_ENV | secret_files(tmp_path), CONTROL, AGENT)
    assert done.returncode == 0, done.stderr
    assert set(yaml.safe_load(done.stdout)["services"]) == {"postgres", "db-upgrade", "serve", "agent"}


@pytest.mark.parametrize(
    ("path", "missing"),
    [
        (CONTROL, "PARITYBOT_APP_ID"),
        (CONTROL, "PARITYBOT_WEBHOOK_SECRET_FILE"),
        (CONTROL, "PARITYBOT_DB_OWNER_PASSWORD_FILE"),
        (AGENT, "PARITYBOT_AGENT_LABELS"),
        (AGENT, "PARITYBOT_AGENT_NAME"),
        (AGENT, "PARITYBOT_AGENT_DATABASE_URL"),
        (AGENT, "PARITYBOT_DB_AGENT_PASSWORD_FILE"),
    ],
)
def test_compose_refuses_a_host_without_a_required_setting_naming_it(
    compose: list[str], tmp_path: Path, path: Path, missing: str
) -> None:
    env = (CONTROL_ENV if path == CONTROL else AGENT_ENV) | secret_files(tmp_path)
    del env[missing]
    done = render(compose, env, path)
    assert done.returncode != 0
    assert f"set {missing}" in done.stderr


def test_compose_passes_a_multi_line_ca_bundle_to_the_build_intact(
    compose: list[str], tmp_path: Path
) -> None:
    pem = "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----"
    env = {
        "PARITYBOT_APP_ID": "1",
        "DOCKER_GID": "998",
        "EXTRA_CA_CERTS": pem,
        "PIP_INDEX_URL": "https://m/simple",
    }
    env |= secret_files(tmp_path)
    done = render(compose, env, COMPOSE)
    assert done.returncode == 0, done.stderr
    args = yaml.safe_load(done.stdout)["services"]["paritybot"]["build"]["args"]
    assert args["EXTRA_CA_CERTS"].strip() == pem and args["PIP_INDEX_URL"] == "https://m/simple"


def test_the_postgres_init_script_is_executable_shell() -> None:
    assert os.access(INIT_ROLES, os.X_OK), "the postgres image runs it only when it is executable"
    done = subprocess.run(["sh", "-n", str(INIT_ROLES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def password_cluster() -> Iterator[dict[str, str]]:
    """A private PostgreSQL (scripts/postgres.sh) that checks passwords on TCP, as a deployment does.

    Yields the libpq environment of its superuser on the unix socket (the postgres image's init
    scripts connect that way) and the TCP port."""
    if not any(Path("/usr/lib/postgresql").glob("*/bin/initdb")) and shutil.which("initdb") is None:
        unavailable("PostgreSQL's server is not installed (scripts/postgres.sh start installs it)")
    pg_dir = Path(tempfile.mkdtemp(prefix="paritybot-pg-"))  # under /tmp: the postgres user reaches it
    env = os.environ | {"PARITYBOT_PG_DIR": str(pg_dir)}
    script = ROOT / "scripts" / "postgres.sh"
    subprocess.run([str(script), "start"], env=env, check=True, capture_output=True)
    try:
        hba = pg_dir / "data" / "pg_hba.conf"
        hba.write_text("local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
        port = (pg_dir / "port").read_text().strip()
        superuser = {"PGHOST": str(pg_dir / "sock"), "PGPORT": port, "PGUSER": "postgres"}
        subprocess.run(
            ["psql", "-d", "postgres", "-c", "SELECT pg_reload_conf()"],
            env=env | superuser,
            check=True,
            capture_output=True,
        )
        yield superuser
    finally:
        subprocess.run([str(script), "stop"], env=env, capture_output=True)
        shutil.rmtree(pg_dir, ignore_errors=True)


def test_the_postgres_init_script_gives_the_agents_a_login_with_their_password(
    password_cluster: dict[str, str], tmp_path: Path
) -> None:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    password = 'it\'s a "pass" word; DROP ROLE postgres; --'  # quotes pasted into SQL would break it
    (secrets / "paritybot_db_agent_password").write_text(password + "\n")
    env = os.environ | password_cluster
    init = env | {
        "POSTGRES_USER": "postgres",
        "POSTGRES_DB": "paritybot",
        "PARITYBOT_SECRETS_DIR": str(secrets),
    }
    done = subprocess.run([str(INIT_ROLES)], env=init, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

    def login(secret: str) -> subprocess.CompletedProcess[str]:
        tcp = {"PGHOST": "127.0.0.1", "PGUSER": "paritybot_agent", "PGPASSWORD": secret}
        return subprocess.run(
            ["psql", "-d", "paritybot", "-tA", "-c", "SELECT current_user"],
            env=env | tcp,
            capture_output=True,
            text=True,
        )

    assert login(password).stdout.strip() == "paritybot_agent"
    refused = login("wrong")
    assert refused.returncode != 0 and "password authentication failed" in refused.stderr
