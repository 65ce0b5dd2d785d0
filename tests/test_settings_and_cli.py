"""The admin's and the user's first contact: settings errors and the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bot.settings import Settings, SettingsError, load_settings

CLI = [sys.executable, "-m", "bot.cli"]


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("PARITYBOT_")}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env={**base, **(env or {})}, cwd=cwd)


def test_serve_refuses_to_start_without_a_webhook_secret() -> None:
    done = run_cli("serve")
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


def test_check_demo_prints_the_pr_comment() -> None:
    done = run_cli("check", "--demo", "--runner", "host")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!-- paritybot:sticky -->")
    assert "tests/test_stats.py::TestMean::test_mean_of_halves" in done.stdout
    assert "runner: host" in done.stderr


def test_check_outside_a_repository_is_a_clear_error(tmp_path: Path) -> None:
    done = run_cli("check", "--repo", str(tmp_path), "--runner", "host")
    assert done.returncode == 2
    assert done.stderr.startswith("paritybot: git") and "Traceback" not in done.stderr


def test_a_recorded_coverage_map_drives_select_tests_and_check(tmp_path: Path) -> None:
    from bot.demo import BROKEN_TEST, make_demo_repo

    demo = make_demo_repo(tmp_path)
    done = run_cli("coverage-map", "--repo", str(demo.path), "--rev", demo.base_sha, "--runner", "host")
    assert done.returncode == 0, done.stderr
    assert "coverage map of" in done.stdout

    selected = run_cli(
        "select-tests", "--repo", str(demo.path), "--base", "main", "--head", "feature", "--json"
    )
    assert selected.returncode == 0, selected.stderr
    doc = json.loads(selected.stdout)
    assert doc["coverage_map"] == demo.base_sha
    by_id = {t["nodeid"]: t["reasons"] for t in doc["tests"]}
    assert any("covers src/calc/stats.py" in r for r in by_id[BROKEN_TEST])
    assert "tests/test_text.py::test_initials" not in by_id  # untouched code's tests are not selected

    checked = run_cli(
        "check", "--repo", str(demo.path), "--base", "main", "--head", "feature", "--runner", "host"
    )
    assert checked.returncode == 1  # the change breaks a test
    assert "covers src/calc/stats.py" in checked.stdout
