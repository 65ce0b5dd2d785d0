"""The `paritybot` command: serve, check, config, env, select-tests, perf.

Every user error is one line on stderr and exit code 2; no tracebacks for things the user can fix.

Longer than most modules: the argument parser of every subcommand lives here, each
subcommand's work in its own module.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bot.cli.checkout import UsageError
from bot.core.config import ConfigError, config_json_schema, parse_repo_config
from bot.core.release import VERSION
from bot.service.logs import configure_logging, log_start

if TYPE_CHECKING:
    from runner.backends.base import RunnerFactory
    from runner.backends.choice import RunnerMode


PYTHON_HELP = (
    "the project's interpreter; the run gets an environment of its own layered on it "
    "(default: the active virtualenv, else paritybot's own)"
)


def _config_option(parser: argparse.ArgumentParser) -> None:
    """``--config FILE``, the same on every command that reads the repository config."""
    parser.add_argument(
        "--config",
        type=Path,
        help="config file instead of the base's .github/paritybot.yml (the change's own edits to it "
        "are not used, as on GitHub)",
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="paritybot", description="GPU CI parity checks for pull requests")
    p.add_argument("--version", action="version", version=f"paritybot {VERSION}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run the GitHub App (webhooks, queue, workers)")
    s.add_argument("--env-file", type=Path, help="a file of PARITYBOT_* settings")

    a = sub.add_parser("agent", help="several hosts: run the jobs of some labels on this GPU host")
    a.add_argument(
        "--labels", required=True, help="the labels this host serves, comma-separated: cuda12.1,h100"
    )
    a.add_argument(
        "--name", default="", help="this agent's name in `paritybot status` (default: the host name)"
    )
    a.add_argument("--env-file", type=Path, help="a file of PARITYBOT_* settings")

    db = sub.add_parser("db", help="the database (SQLite or PostgreSQL)")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    up = db_sub.add_parser(
        "upgrade", help="create or upgrade the schema (procrastinate's too, on PostgreSQL)"
    )
    up.add_argument("--env-file", type=Path, help="a file of PARITYBOT_* settings")
    ds = db_sub.add_parser(
        "status", help="the schema version, and which releases run on it as it is (before a rollback)"
    )
    ds.add_argument("--release", help="exit 1 unless this release runs on the database as it is")
    ds.add_argument("--env-file", type=Path, help="a file of PARITYBOT_* settings")

    st = sub.add_parser("status", help="several hosts: queues, agents and running jobs")
    st.add_argument("--json", action="store_true")
    st.add_argument("--env-file", type=Path, help="a file of PARITYBOT_* settings")

    c = sub.add_parser("check", help="run the PR pipeline on a local git checkout and print the PR comment")
    c.add_argument("--repo", type=Path, default=Path("."), help="the git checkout (default: .)")
    c.add_argument("--base", help="what the change is compared with (default: origin/HEAD, main, master)")
    c.add_argument("--head", default="HEAD", help="the commit to check (default: HEAD)")
    c.add_argument("--env", dest="environment", help="environment name from the config")
    _config_option(c)
    c.add_argument(
        "--runner",
        choices=["auto", "host", "docker"],
        default="auto",
        help="auto: the environment's image when a container engine answers, else this machine's "
        "host (said before anything runs); docker: a container or nothing",
    )
    c.add_argument("--python", help=PYTHON_HELP)
    c.add_argument("--image", help="run in this container image instead of the environment's")
    c.add_argument("--gpus", help="with --image: all, none, a count, or device ids (a,b)")
    c.add_argument("--pr-body", type=Path, help="a PR description (with collect_env output) to compare with")
    c.add_argument("--demo", action="store_true", help="check a built-in sample project (no checkout needed)")
    c.add_argument("--json", action="store_true", help="print the run report as JSON instead")

    m = sub.add_parser(
        "coverage-map", help="record a commit's per-test coverage map, for `check` and `select-tests`"
    )
    m.add_argument("--repo", type=Path, default=Path("."))
    m.add_argument("--rev", default="HEAD", help="the commit to map (default: HEAD)")
    m.add_argument("--env", dest="environment", help="environment name from the config")
    m.add_argument("--runner", choices=["auto", "host", "docker"], default="auto")
    m.add_argument("--python", help=PYTHON_HELP)
    _config_option(m)
    m.add_argument("--json", action="store_true", help="print what was recorded as JSON")

    cfg = sub.add_parser("config", help="the repository config (.github/paritybot.yml)")
    cfg_sub = cfg.add_subparsers(dest="config_command", required=True)
    v = cfg_sub.add_parser("validate", help="check a config file")
    v.add_argument("file", type=Path)
    cfg_sub.add_parser("schema", help="print the config's JSON Schema")

    e = sub.add_parser("env", help="contributors' environment reports")
    e_sub = e.add_subparsers(dest="env_command", required=True)
    ep = e_sub.add_parser("parse", help="parse torch.utils.collect_env output (or a PR description)")
    ep.add_argument("file")
    ep.add_argument("--json", action="store_true")

    pf = sub.add_parser("perf", help="compare the change's benchmarks with its base's, in alternating rounds")
    pf.add_argument("--repo", type=Path, default=Path("."), help="the git checkout (default: .)")
    pf.add_argument("--base", required=True, help="what the change is compared with (its merge base is used)")
    pf.add_argument("--head", default="HEAD", help="the commit to compare (default: HEAD)")
    pf.add_argument("--runner", choices=["auto", "host", "docker"], default="auto")
    pf.add_argument("--python", help=PYTHON_HELP)
    pf.add_argument(
        "--affected", action="store_true", help="only the pytest benchmarks the change can affect, with why"
    )
    _config_option(pf)
    pf.add_argument("--json", action="store_true", help="print the comparisons as JSON")

    r = sub.add_parser(
        "repro", help="into a run's own environment (image, commit, GPUs), its failing test rerun"
    )
    r.add_argument(
        "run", help="a run page URL, its JSON URL, a pull request URL or owner/repo#N (its latest run)"
    )
    r.add_argument("--test", help="the test to rerun (default: the run's first failing test)")
    modes = r.add_mutually_exclusive_group()
    modes.add_argument(
        "--shell", dest="mode", action="store_const", const="shell", help="a shell there (default)"
    )
    modes.add_argument(
        "--ssh",
        dest="mode",
        action="store_const",
        const="ssh",
        help="sshd there (the image's), reached on a 127.0.0.1 port with your key",
    )
    modes.add_argument(
        "--jupyter",
        dest="mode",
        action="store_const",
        const="jupyter",
        help="JupyterLab there, reached on a 127.0.0.1 port with a token",
    )
    modes.add_argument(
        "--rerun-only",
        dest="mode",
        action="store_const",
        const="none",
        help="rerun the test and exit: 0 reproduced, 1 not",
    )
    r.add_argument(
        "--runner",
        choices=["docker", "host"],
        default="docker",
        help="docker: the run's image (default); host: this machine, with the project's interpreter",
    )
    r.add_argument("--python", help=PYTHON_HELP)
    r.add_argument("--server", help="the paritybot service, for a pull request (default: PARITYBOT_SERVER)")
    r.add_argument("--token-file", help="your GitHub token, for a private repository (default: GITHUB_TOKEN)")
    r.add_argument("--key", type=Path, help="--ssh: your public key (default: ~/.ssh/*.pub)")

    t = sub.add_parser("select-tests", help="which tests a change can affect, and why")
    t.add_argument("--repo", default=".")
    t.add_argument("--base", required=True)
    t.add_argument("--head")
    t.add_argument("--json", action="store_true")
    _config_option(t)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _dispatch(args)
    except (ConfigError, UsageError) as exc:
        print(f"paritybot: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `paritybot config schema | head`
        sys.stderr.close()
        return 0


def _dispatch(args: argparse.Namespace) -> int:
    if args.command not in ("serve", "agent"):
        configure_logging("console", "warning")  # stdout is the command's own output
    if args.command == "serve":
        return _serve(args)
    if args.command in ("agent", "db", "status"):
        return _fleet(args)
    if args.command == "check":
        return _check(args)
    if args.command == "config":
        return _config(args)
    if args.command == "coverage-map":
        return _coverage_map(args)
    if args.command == "perf":
        from bot.cli.perf import perf_main

        runners = _local_runners(args.runner, args.python)
        return asyncio.run(
            perf_main(
                args.repo,
                args.base,
                args.head,
                runners,
                affected=args.affected,
                config_file=args.config,
                as_json=args.json,
            )
        )
    if args.command == "repro":
        return _repro(args)
    if args.command == "env":
        from bot.cli.env import env_parse_main

        return env_parse_main(args.file, args.json)
    from bot.cli.select_tests import select_tests_main

    return select_tests_main(args.repo, args.base, args.head, args.json, args.config)


def _serve(args: argparse.Namespace) -> int:
    # The service's modules are imported here only: the local commands start faster without them.
    from bot.service.app import serve
    from bot.service.settings import SettingsError, load_settings
    from bot.service.setup import check_setup_settings, serve_setup
    from bot.service.store.protocol import StoreError

    try:
        settings = load_settings(args.env_file)
        if settings.awaiting_app_setup():
            # No App yet: the set-up page registers it, then `serve` goes on as that App.
            check_setup_settings(settings)
            configure_logging(settings.log_format, settings.log_level)
            if not asyncio.run(serve_setup(settings)):
                return 0
            settings = load_settings(args.env_file)
        settings.require_serving()
        configure_logging(settings.log_format, settings.log_level)
        log_start("serve", settings.deprecation_warnings())
        asyncio.run(serve(settings))
    except (SettingsError, StoreError) as exc:
        raise UsageError(str(exc)) from None
    return 0


def _fleet(args: argparse.Namespace) -> int:
    """The several-hosts commands; like `serve`, their modules are imported only here."""
    from bot.cli.fleet import agent_main, db_upgrade_main, status_main
    from bot.service.settings import SettingsError, load_settings
    from bot.service.store.protocol import StoreError

    try:
        settings = load_settings(args.env_file)
        if args.command == "agent":
            return agent_main(settings, args.labels, args.name)
        if args.command == "db" and args.db_command == "status":
            from bot.cli.db_status import db_status_main

            return db_status_main(settings, args.release)
        if args.command == "db":
            return db_upgrade_main(settings)
        return status_main(settings, as_json=args.json)
    except (SettingsError, StoreError) as exc:
        raise UsageError(str(exc)) from None


def _local_runners(mode: RunnerMode, python: str | None = None) -> RunnerFactory:
    from bot.cli.local_check import local_runners

    return local_runners(mode, python)


def _check(args: argparse.Namespace) -> int:
    from bot.cli.local_check import not_caused_line, render_local, run_local_check

    configure_logging("console", "warning")
    repo, base, head = args.repo, args.base, args.head
    if args.demo:
        from bot.cli.checkout import cache_root
        from bot.cli.demo import make_demo_repo

        # Rebuilt on each run, with the same commit ids, where its repro commands keep working.
        demo = make_demo_repo(cache_root() / "demo", fresh=True)
        repo, base, head = demo.path, demo.base_sha, demo.head_sha
        print(f"demo: a sample project at {demo.path}, checking its last commit", file=sys.stderr)
    pr_body = "" if args.pr_body is None else _read_text(args.pr_body, "--pr-body")
    report = asyncio.run(
        run_local_check(
            repo,
            base=base,
            head=head,
            runner_factory=_local_runners(args.runner, args.python),
            environment=args.environment,
            config_file=args.config,
            pr_body=pr_body,
            image=args.image,
            gpus=_gpus(args.gpus),
        )
    )
    markdown, code = render_local(report)
    print(report.model_dump_json(indent=2) if args.json else markdown)
    if (line := not_caused_line(report, code)) is not None:
        print(line, file=sys.stderr)
    if args.demo and code == 1:
        # The demo's change is meant to fail its checks; the demo itself worked.
        print("demo: the sample change fails its checks, as intended", file=sys.stderr)
        return 0
    return code


def _repro(args: argparse.Namespace) -> int:
    import os

    from bot.cli.repro import ReproOptions, repro_main
    from bot.cli.repro_record import read_token

    options = ReproOptions(
        run=args.run,
        test=args.test,
        mode=args.mode or "shell",
        runner=args.runner,
        server=args.server or os.environ.get("PARITYBOT_SERVER"),
        token=read_token(args.token_file, dict(os.environ)),
        python=args.python,
        key=args.key,
    )
    return asyncio.run(repro_main(options))


def _coverage_map(args: argparse.Namespace) -> int:
    from bot.cli.checkout import coverage_dir, open_checkout
    from bot.cli.local_check import run_local_check
    from bot.core.models import RunKind, RunState

    configure_logging("console", "warning")
    report = asyncio.run(
        run_local_check(
            args.repo,
            base=None,
            head=args.rev,
            runner_factory=_local_runners(args.runner, args.python),
            environment=args.environment,
            config_file=args.config,
            kind=RunKind.BASELINE,
        )
    )
    failed = report.state != RunState.SUCCEEDED or bool(report.error)
    where = coverage_dir(open_checkout(args.repo))
    health = report.coverage_map
    if args.json:
        doc = {
            "commit": report.head_sha,
            "recorded": not failed,
            "error": (report.error or report.state.value) if failed else None,
            "directory": None if failed else str(where),
            "health": health.model_dump(mode="json") if health else None,
            "holes": health.holes if health else [],
        }
        print(json.dumps(doc, indent=2))
    if failed:
        print(
            f"paritybot: no coverage map for {args.rev}: {report.error or report.state.value}",
            file=sys.stderr,
        )
        return 1
    if not args.json:
        print(
            f"coverage map of {report.head_sha[:12]} recorded in {where}"
            + (f": {health.describe()}" if health else "")
        )
    if health is not None and health.holes:
        print(
            f"paritybot: the map is partial: it knows nothing of {', '.join(health.holes)}; selections "
            "use the static signals for the tests there",
            file=sys.stderr,
        )
    return 0


def _read_text(path: Path, option: str = "") -> str:
    """A file the user named; a UsageError naming it (and the option) when it cannot be read."""
    try:
        return path.read_text()
    except OSError as exc:
        raise UsageError(f"{option} {path}: {exc.strerror}".lstrip()) from None
    except UnicodeDecodeError:
        raise UsageError(f"{option} {path}: not a text file (not UTF-8)".lstrip()) from None


def _gpus(value: str | None) -> str | int | list[str] | None:
    if value is None or value in ("all", "none"):
        return value
    if value.isdigit():
        return int(value)
    return [v.strip() for v in value.split(",") if v.strip()]


def _config(args: argparse.Namespace) -> int:
    if args.config_command == "schema":
        print(json.dumps(config_json_schema(), indent=2))
        return 0
    text = _read_text(args.file)
    try:
        config = parse_repo_config(text, str(args.file))
    except ConfigError as exc:
        print(f"{args.file}: invalid", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    names = ", ".join(e.name for e in config.environments)
    print(f"{args.file}: valid ({len(config.environments)} environment(s): {names})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
