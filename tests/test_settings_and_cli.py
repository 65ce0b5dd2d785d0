"""The admin's and the user's first contact: settings errors and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import payloads
import pytest
from botharness import SECRET, BotHarness
from cli_run import run_cli
from fakegithub import FakeGitHub

from bot.core.release import VERSION
from bot.service.settings import Settings, SettingsError, load_settings


def test_serve_refuses_to_start_without_an_app_saying_how_to_give_or_register_one() -> None:
    done = run_cli("serve")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "paritybot: no GitHub App configured (PARITYBOT_APP_ID, PARITYBOT_PRIVATE_KEY_PATH, "
        "PARITYBOT_WEBHOOK_SECRET_FILE); to register one from the set-up page, set where it writes the "
        "App's credentials: PARITYBOT_APP_ID_FILE, PARITYBOT_PRIVATE_KEY_PATH, PARITYBOT_WEBHOOK_SECRET_FILE, "
        "PARITYBOT_CLIENT_ID_FILE, PARITYBOT_CLIENT_SECRET_FILE, and PARITYBOT_PUBLIC_URL"
    )


def test_serve_refuses_to_start_without_a_webhook_secret() -> None:
    done = run_cli("serve", env={"PARITYBOT_APP_ID": "1"})
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == "paritybot: PARITYBOT_WEBHOOK_SECRET: not set; refusing to accept unsigned webhooks"
    )


def test_a_bad_setting_is_one_line_naming_it() -> None:
    done = run_cli("serve", env={"PARITYBOT_PORT": "eighty", "PARITYBOT_WEBHOOK_SECRET": "s"})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("paritybot: PARITYBOT_PORT:")


def test_missing_private_key_file_is_named(tmp_path: Path) -> None:
    settings = load_settings(
        webhook_secret="s", app_id=1, private_key_path=tmp_path / "nope.pem", database_url="sqlite:///x.db"
    )
    with pytest.raises(SettingsError, match="PARITYBOT_PRIVATE_KEY_PATH: cannot read"):
        settings.require_serving()


def test_defaults_point_at_github_and_an_embedded_database() -> None:
    settings = Settings()
    assert settings.github_api_url == "https://api.github.com"
    assert settings.database_url.startswith("sqlite:///")


def test_defaults_run_every_pull_request_in_a_container() -> None:
    settings = Settings()
    assert settings.runner == "docker"
    assert settings.allow_host_runner is None and settings.default_image is None
    # Compose passes settings left out of .env as empty strings: they stay unset.
    assert Settings(allow_host_runner="", default_image="").default_image is None


SERVING = {
    "PARITYBOT_WEBHOOK_SECRET": "s3cret-webhook",
    "PARITYBOT_APP_ID": "1",
    "PARITYBOT_PRIVATE_KEY": "-----BEGIN PRIVATE KEY-----\nAAAAB3NzaC1yc2EAAAADAQABAAABAQ\n-----END PRIVATE KEY-----\n",
}


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        (
            {"PARITYBOT_RUNNER": "host"},
            "paritybot: PARITYBOT_RUNNER=host: refusing to start without "
            "PARITYBOT_ALLOW_HOST_RUNNER=trusted-code-only",
        ),
        (
            {"PARITYBOT_RUNNER": "host", "PARITYBOT_ALLOW_HOST_RUNNER": "yes"},
            "paritybot: PARITYBOT_ALLOW_HOST_RUNNER: Input should be 'trusted-code-only'",
        ),
        (
            {"PARITYBOT_RUNNER": "auto"},
            "paritybot: PARITYBOT_RUNNER: Value error, 'auto' is no longer accepted",
        ),
    ],
)
def test_serve_refuses_a_host_runner_not_asked_for_in_so_many_words(
    settings: dict[str, str], line: str, tmp_path: Path
) -> None:
    # A service that started anyway would serve until killed: the timeout fails the test then.
    done = run_cli("serve", env={**SERVING, **settings}, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(line) and done.stderr.count("\n") == 1, done.stderr


async def test_a_webhook_secret_file_is_the_secret_deliveries_are_checked_with(
    fake_github: FakeGitHub, tmp_path: Path
) -> None:
    # A container secret, written the way an operator writes one: with a trailing newline.
    secret_file = tmp_path / "webhook-secret"
    secret_file.write_text(SECRET + "\n")
    bot = await BotHarness.create(
        fake_github, tmp_path, settings={"webhook_secret": None, "webhook_secret_file": secret_file}
    )
    try:
        assert await bot.send("ping", {"zen": "z", "hook_id": 1}) == 200
        body, headers = payloads.delivery("ping", {"zen": "z", "hook_id": 1}, SECRET + "\n")
        assert (await bot.post(body, headers)).status == 401
        assert SECRET in bot.settings().service_secrets()  # redacted from every run's output
    finally:
        await bot.stop()


@pytest.mark.parametrize(
    ("content", "both", "line"),
    [
        (
            None,
            False,
            "paritybot: PARITYBOT_WEBHOOK_SECRET_FILE: cannot read {file}: No such file or directory",
        ),
        ("\n", False, "paritybot: PARITYBOT_WEBHOOK_SECRET_FILE: {file} is empty"),
        (
            "s3cret",
            True,
            "paritybot: PARITYBOT_WEBHOOK_SECRET_FILE: PARITYBOT_WEBHOOK_SECRET is set too; keep one",
        ),
    ],
)
def test_serve_refuses_a_webhook_secret_file_it_cannot_use_in_one_line(
    content: str | None, both: bool, line: str, tmp_path: Path
) -> None:
    secret_file = tmp_path / "webhook-secret"
    if content is not None:
        secret_file.write_text(content)
    env = {**SERVING, "PARITYBOT_WEBHOOK_SECRET_FILE": str(secret_file)}
    if not both:
        del env["PARITYBOT_WEBHOOK_SECRET"]
    done = run_cli("serve", env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert done.stderr == line.format(file=secret_file) + "\n"


def test_a_database_password_file_completes_the_roles_url(tmp_path: Path) -> None:
    password = tmp_path / "db-password"
    password.write_text("p@ss:w/rd%\n")
    settings = load_settings(
        database_url="postgresql://paritybot_agent@db.example.org:5432/paritybot?sslmode=verify-full",
        database_password_file=password,
    )
    assert settings.database_url == (
        "postgresql://paritybot_agent:p%40ss%3Aw%2Frd%25@db.example.org:5432/paritybot?sslmode=verify-full"
    )


@pytest.mark.parametrize(
    ("url", "error"),
    [
        ("sqlite:///paritybot.db", "only a postgresql:// database takes a password"),
        ("postgresql://agent:old@db/paritybot", "PARITYBOT_DATABASE_URL holds a password already"),
        ("postgresql://db/paritybot", "PARITYBOT_DATABASE_URL names no role"),
    ],
)
def test_a_database_password_file_the_url_cannot_take_is_refused(
    url: str, error: str, tmp_path: Path
) -> None:
    password = tmp_path / "db-password"
    password.write_text("secret")
    with pytest.raises(SettingsError, match=f"^PARITYBOT_DATABASE_PASSWORD_FILE: {error}"):
        load_settings(database_url=url, database_password_file=password)


def test_the_service_secrets_are_the_webhook_secret_and_the_key_line_by_line() -> None:
    key = SERVING["PARITYBOT_PRIVATE_KEY"]
    settings = Settings(webhook_secret="s3cret-webhook", private_key=key)
    assert settings.service_secrets() == ("s3cret-webhook", key.strip(), "AAAAB3NzaC1yc2EAAAADAQABAAABAQ")


def test_config_validate_names_key_value_and_expectation(tmp_path: Path) -> None:
    bad = tmp_path / "paritybot.yml"
    bad.write_text("environments:\n  - name: gpu\n    gpus: lots\ntests:\n  reruns: -1\nunknown: 1\n")
    done = run_cli("config", "validate", str(bad))
    assert done.returncode == 2
    assert "`tests.reruns` = -1" in done.stderr and "greater than or equal to 0" in done.stderr
    assert "`unknown`: unknown key" in done.stderr
    assert "environments.0.gpus" in done.stderr and "'lots'" in done.stderr


def test_config_validate_accepts_a_good_file_and_schema_is_json(tmp_path: Path) -> None:
    good = tmp_path / "paritybot.yml"
    good.write_text("environments:\n  - name: cuda12\n    image: ci:cuda12\n    default: true\n")
    done = run_cli("config", "validate", str(good))
    assert done.returncode == 0 and "cuda12" in done.stdout
    schema = json.loads(run_cli("config", "schema").stdout)
    assert "environments" in schema["properties"]


def test_config_schema_shows_every_default_including_those_made_in_code() -> None:
    schema = json.loads(run_cli("config", "schema").stdout)
    models = {"RepoConfig": schema, **schema["$defs"]}
    missing = [
        f"{model}.{key}"
        for model, body in models.items()
        for key, prop in body.get("properties", {}).items()
        if key not in body.get("required", []) and "default" not in prop
    ]
    assert missing == []
    settings = schema["$defs"]["TestSettings"]["properties"]
    assert settings["paths"]["default"] == []  # what pytest collects with no arguments
    assert "pyproject.toml" in settings["whole_suite_globs"]["default"]
    assert schema["properties"]["environments"]["default"][0]["name"] == "default"
    assert schema["properties"]["trust"]["default"]["associations"] == ["OWNER", "MEMBER", "COLLABORATOR"]


def test_check_demo_prints_the_pr_comment_on_a_laptop_without_engine(tmp_path: Path) -> None:
    done = run_cli("check", "--demo", env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}, home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!-- paritybot:sticky -->")
    assert "tests/test_stats.py::TestMean::test_mean_of_halves" in done.stdout
    assert "runner: host: the checked code runs on this machine, as you, without a container" in done.stderr


def test_a_recorded_coverage_map_drives_select_tests_and_check(tmp_path: Path) -> None:
    from bot.cli.demo import BROKEN_TEST, make_demo_repo

    demo = make_demo_repo(tmp_path)
    done = run_cli(
        "coverage-map", "--repo", str(demo.path), "--rev", demo.base_sha, "--runner", "host", home=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "coverage map of" in done.stdout

    selected = run_cli(
        "select-tests",
        "--repo",
        str(demo.path),
        "--base",
        "main",
        "--head",
        "feature",
        "--json",
        home=tmp_path,
    )
    assert selected.returncode == 0, selected.stderr
    doc = json.loads(selected.stdout)
    assert doc["coverage_map"] == demo.base_sha
    by_id = {t["nodeid"]: t["reasons"] for t in doc["tests"]}
    assert any("covers src/calc/stats.py" in r for r in by_id[BROKEN_TEST])
    assert "tests/test_text.py::test_initials" not in by_id  # untouched code's tests are not selected

    checked = run_cli(
        "check",
        "--repo",
        str(demo.path),
        "--base",
        "main",
        "--head",
        "feature",
        "--runner",
        "host",
        home=tmp_path,
    )
    assert checked.returncode == 1  # the change breaks a test
    assert "covers src/calc/stats.py" in checked.stdout


def test_serve_refuses_a_database_newer_than_itself_in_one_line(tmp_path: Path) -> None:
    import sqlite3

    from bot.service.store.sqlite import SQLiteStore
    from bot.service.store.sqlite_schema import migrations

    db = tmp_path / "paritybot.db"
    SQLiteStore(db).close()
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {len(migrations()) + 1}")
    conn.close()
    env = {**SERVING, "PARITYBOT_DATABASE_URL": f"sqlite:///{db}", "PARITYBOT_RUNNER": "docker"}
    done = run_cli("serve", env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    # The log's first line says which paritybot refused; the refusal itself is one line.
    started, refusal = done.stderr.splitlines()
    assert json.loads(started)["event"] == "starting" and json.loads(started)["version"] == VERSION
    assert refusal.startswith(f"paritybot: {db}: the database is at schema version"), done.stderr


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        (
            {"PARITYBOT_PRIVATE_KEY": SERVING["PARITYBOT_PRIVATE_KEY"]},
            "paritybot: PARITYBOT_PRIVATE_KEY: set for an agent; agents never hold the App's private key",
        ),
        (
            {"PARITYBOT_PRIVATE_KEY_PATH": "/run/secrets/key.pem"},
            "paritybot: PARITYBOT_PRIVATE_KEY: set for an agent; agents never hold the App's private key",
        ),
        (
            {"PARITYBOT_WEBHOOK_SECRET": "s3cret"},
            "paritybot: PARITYBOT_WEBHOOK_SECRET: set for an agent, which never needs it",
        ),
        (
            {"PARITYBOT_DATABASE_URL": "sqlite:///x.db"},
            "paritybot: PARITYBOT_DATABASE_URL: an agent needs the PostgreSQL of the service",
        ),
        (
            {"PARITYBOT_RUNNER": "host", "PARITYBOT_ALLOW_HOST_RUNNER": "trusted-code-only"},
            "paritybot: PARITYBOT_RUNNER=host: agents run jobs in containers only",
        ),
    ],
)
def test_an_agent_refuses_the_apps_secrets_and_a_database_of_its_own(
    settings: dict[str, str], line: str, tmp_path: Path
) -> None:
    env = {"PARITYBOT_DATABASE_URL": "postgresql://agent@127.0.0.1:1/paritybot", **settings}
    done = run_cli("agent", "--labels", "cuda12.1", env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(line), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_agent_labels_are_checked_before_anything_starts(tmp_path: Path) -> None:
    env = {"PARITYBOT_DATABASE_URL": "postgresql://agent@127.0.0.1:1/paritybot"}
    done = run_cli("agent", "--labels", "cuda12.1,../etc", env=env, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "paritybot: --labels: ../etc: labels are letters, digits, . _ -\n"
