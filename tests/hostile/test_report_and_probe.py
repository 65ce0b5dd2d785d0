"""A pull request attacks what the bot posts, and the probe that fills the parity table.

What the bot posts: every text a run produces (test names and output, hook ids and output, the
fixes diff, names in the code, paths, pasted and probed versions, errors) is written by the
PR's author. Rendered into the sticky comment and the check runs, none of it may ping anyone,
add HTML, links or images, close our sections, hide the rest in an HTML comment, or write a
second sticky marker. "Live" is decided as GitHub decides it (``markdown_check``): the body is
rendered with cmark-gfm, and mentions count only in text outside code and links.

The probe: a PR that commits a fake ``torch`` package, a dist-info, or modules shadowing the
standard library must not change what the parity table says about the image.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest
import report_samples as samples
import structlog
from botharness import REPO, BotHarness, bot
from docker_support import docker_client, test_image
from gitrepo import GitRepo
from markdown_check import Rendered, inspect, live_mentions
from sample_repo import tool_env

from bot.cli.checkout import UsageError
from bot.cli.local_check import load_local_config, run_local_check
from bot.core.config import Environment, TestSettings
from bot.core.kinds import Stage
from bot.core.models import (
    CheckStatus,
    DocstringResult,
    EnvFacts,
    Finding,
    HookResult,
    HookStatus,
    Level,
    ParityReport,
    ParityRow,
    ParityVerdict,
    PrecommitResult,
    RfcItem,
    RfcReport,
    RunReport,
    RunState,
    SelectedTest,
    Selection,
    TestCaseResult,
    TestOutcome,
    TestsResult,
)
from bot.render.check_results import render_check_runs
from bot.render.check_runs import CheckRunOutput, render_config_error_output
from bot.render.comment import STICKY_MARKER, CommentSection, render_comment, render_pr_comment
from runner.backends.base import SCRATCH_DIR, RunnerRequest, Step
from runner.backends.docker import WORKSPACE_DIR, DockerRunner
from runner.backends.host import HostRunner
from runner.checks.repro import ReproContext
from runner.checks.testexec import run_tests
from runner.parity import build_parity
from runner.probe.probe import parse_probe, probe_step

__all__ = ["bot", "docker_client", "test_image"]  # fixtures, imported for pytest

RUN_URL = f"https://github.com/{samples.REPO}/runs/26012345678"
# Everything an attacker would try, on several lines, with a fence-closing line in the middle so
# that what follows it would be live if the fence could be closed.
H = (
    "@octocat @octo-org/maintainers (@octo-org/security) octo-org/calc#1 mail@evil.example\n"
    "<img src=x onerror=alert(1)> <script>alert(1)</script> </details></summary>\n"
    "<!-- paritybot:sticky --> <!-- the rest is hidden\n"
    "```\n"
    "~~~\n"
    "after the fence: @octocat <img src=x onerror=alert(2)> </details> <details open>\n"
    "[x](javascript:alert(1)) ![](http://tracker.example/p.png) www.tracker.example\n"
    "`code` ``` | pipe | -->"
)
OUR_TAGS = {
    "p", "details", "summary", "b", "sub", "br", "code", "pre", "ul", "ol", "li", "h2", "h3",
    "strong", "em", "table", "thead", "tbody", "tr", "th", "td", "a", "hr", "blockquote",
}  # fmt: skip
OUR_LINKS = (RUN_URL, "https://github.com/apps/paritybot")


def _h(tag: str) -> str:
    """The hostile text, tagged so a finding names the field it came from."""
    return f"{tag}: {H}"


def hostile_report() -> RunReport:
    """A failing run where every text field the PR can influence holds the attack."""
    report = samples.failing_run()
    nodeid = f"tests/test_evil.py::test_x[{_h('nodeid')}]"
    report.runner_reason = _h("runner_reason")
    report.probe = EnvFacts(source="probe", torch=_h("probe torch"), packages={_h("pkg"): _h("pkg version")})
    report.precommit = PrecommitResult(
        status=CheckStatus.FAILED,
        hooks=[
            HookResult(id=_h("hook id"), name=_h("hook name"), status=HookStatus.FAILED, output=_h("out")),
            HookResult(id="ruff", name=_h("passing hook"), status=HookStatus.PASSED),
        ],
        fix_command=_h("fix command"),
        diff=_h("diff"),
        output=_h("pre-commit output"),
        message=_h("pre-commit message"),
    )
    report.docstrings = DocstringResult(
        status=CheckStatus.FAILED,
        style=_h("style"),
        findings=[
            Finding(
                path=_h("path").replace("\n", " "),
                line=3,
                level=Level.FAILURE,
                title=_h("t"),
                message=_h("m"),
            )
        ],
        checked=1,
        message=_h("docstrings message"),
    )
    report.tests = TestsResult(
        status=CheckStatus.FAILED,
        selection=Selection(
            tests=[SelectedTest(nodeid=nodeid, reasons=[_h("reason"), f"`{_h('quoted reason')}` changed"])],
            total_tests=10,
            budget_dropped=[_h("dropped")],
        ),
        results=[
            TestCaseResult(
                nodeid=nodeid, outcome=TestOutcome.FAILED, message=_h("failure"), repro=[_h("repro")]
            ),
            TestCaseResult(nodeid=nodeid + "2", outcome=TestOutcome.FLAKY, message=_h("flaky"), attempts=2),
            TestCaseResult(nodeid=_h("error id"), outcome=TestOutcome.ERROR, message=f"E   {_h('headline')}"),
        ],
        message=_h("tests message"),
        output=_h("tests output"),
    )
    report.parity = ParityReport(
        rows=[
            ParityRow(
                field=_h("field"),
                label=_h("label"),
                reference=_h("reference"),
                this_run=_h("probed"),
                contributor=_h("pasted"),
                verdict=ParityVerdict.DIFFERS,
                contributor_verdict=ParityVerdict.DIFFERS,
            )
        ],
        advice=[_h("advice")],
        contributor_pasted=True,
    )
    report.rfc = RfcReport(
        triggered=True,
        reasons=[_h("rfc reason"), f"adds dependency `{_h('dep')}`"],
        items=[RfcItem(text=_h("item"), done=False)],
        rfc_link="javascript:alert(1)//@octocat",
    )
    return report


def broken_report() -> RunReport:
    """The same attack through the paths of a run that broke: errors, outputs, not-run notes."""
    report = hostile_report()
    report.error = _h("run error")
    assert report.precommit is not None and report.tests is not None
    report.precommit = report.precommit.model_copy(update={"status": CheckStatus.ERROR})
    report.docstrings = DocstringResult(status=CheckStatus.NOT_CONFIGURED, message=_h("not configured"))
    report.tests = report.tests.model_copy(
        update={
            "status": CheckStatus.ERROR,
            "results": [],
            "selection": Selection(whole_suite=True, whole_suite_reasons=[_h("whole suite")]),
        }
    )
    return report


def _comments() -> dict[str, str]:
    report, broken = hostile_report(), broken_report()
    bodies = {
        "done": render_comment(report, stage=Stage.DONE, check_run_url=RUN_URL),
        "broken": render_comment(broken, stage=Stage.DONE, check_run_url=RUN_URL),
        "queued": render_comment(report, stage=Stage.QUEUED, queue_position=2),
        "running": render_comment(report.model_copy(update={"state": RunState.RUNNING}), stage=Stage.RUNNING),
        "cancelled": render_comment(
            broken, stage=Stage.CANCELLED, notice="Cancelled: a newer commit was pushed."
        ),
        "config error": render_comment(None, stage=Stage.CONFIG_ERROR, notice="- " + _h("problem")),
        "two environments": render_pr_comment(
            [
                CommentSection(environment="cuda12", stage=Stage.DONE, report=report),
                CommentSection(environment="rocm6", stage=Stage.DONE, report=broken),
            ],
            check_run_url=RUN_URL,
        ),
    }
    return bodies


def _check_runs() -> dict[str, CheckRunOutput]:
    outputs = {}
    for name, report in (("done", hostile_report()), ("broken", broken_report())):
        for out in render_check_runs(report):
            outputs[f"{name} {out.kind.value}"] = out
    outputs["config error"] = render_config_error_output("cuda12", problems=[_h("problem")])[0]
    return outputs


def _assert_inert(page: Rendered, where: str, links: tuple[str, ...] = OUR_LINKS) -> None:
    assert page.live == [], f"{where}: live mentions or references {page.live}"
    assert page.unbalanced == [], f"{where}: our structure was broken: {page.unbalanced}"
    tags = {tag for tag, _ in page.tags}
    assert tags <= OUR_TAGS, f"{where}: HTML from the input: {tags - OUR_TAGS}"
    attrs = {name for _, a in page.tags for name in a if name not in ("href", "open", "lang", "align")}
    assert not attrs, f"{where}: attributes from the input: {attrs}"
    bad_links = [href for href in page.links() if not href.startswith(links)]
    assert not bad_links, f"{where}: links from the input: {bad_links}"


@pytest.mark.parametrize("case", list(_comments()))
def test_the_sticky_comment_neutralises_every_field(case: str) -> None:
    body = _comments()[case]
    page = inspect(body)
    _assert_inert(page, case)
    # Exactly one marker, ours, at the top; no other HTML comment hides anything.
    assert body.startswith(STICKY_MARKER + "\n")
    assert body.count("<!--") == 1 and page.comments == [" paritybot:sticky "]
    assert body.count("paritybot:sticky") >= 1  # the input's copies are there, broken, in code


def test_the_attack_is_shown_not_dropped() -> None:
    """Neutralised, not hidden: a reader still sees what the test printed, as text or code."""
    page = inspect(_comments()["done"])
    code = "".join(page.code_text)
    assert "@octo-org/maintainers" in code and "<img src=x onerror=alert(1)>" in code
    words = "".join(page.text_outside_code).replace("\u200b", "")
    assert "reason: @octocat @octo-org/maintainers" in words  # the selection reason, as text


@pytest.mark.parametrize("case", list(_check_runs()))
def test_every_check_run_field_is_neutralised(case: str) -> None:
    out = _check_runs()[case]
    for part in ("summary", "text"):
        body = getattr(out, part)
        _assert_inert(inspect(body), f"{case} {part}")
        assert "<!--" not in body, f"{case} {part}"
    # Titles and annotations are plain text on GitHub: nothing to render, mentions still broken.
    plain: list[tuple[str, Any]] = [("title", out.title)]
    plain += [(f"annotation {k}", a[k]) for a in out.annotations for k in ("message", "title") if k in a]
    for field, value in plain:
        assert live_mentions(value) == [], f"{case} {field}: {value!r}"
        assert "<!--" not in value, f"{case} {field}"


def test_the_attack_reaches_every_check_run() -> None:
    """The check-run test above must see the attack, or it proves nothing."""
    outputs = _check_runs()
    seen: Callable[[CheckRunOutput], str] = lambda o: o.title + o.summary + o.text + str(o.annotations)  # noqa: E731
    for kind in ("pre-commit", "docstrings", "tests", "parity"):
        assert "octo-org" in seen(outputs[f"done {kind}"]), kind
    assert any("hook id" in o.title for o in outputs.values())
    assert any(a.get("title", "").startswith("t: @") for o in outputs.values() for a in o.annotations)


# --- End to end: a PR's failing test prints a team mention, and its name holds HTML ----------------

HOSTILE_TEST = """\
import pytest

NAME = "<img src=x onerror=alert(1)></details><!-- paritybot:sticky -->"


@pytest.mark.parametrize("case", [NAME], ids=[NAME])
def test_hostile(case):
    print("@octo-org/maintainers please look")
    assert False, "@octo-org/maintainers <img src=x onerror=alert(2)> </details> ``` " + case
"""


async def test_a_failing_test_that_pings_a_team_pings_no_one(bot: BotHarness) -> None:
    sha = bot.commit_on_feature("tests/test_hostile.py", HOSTILE_TEST, "test: a hostile test")
    assert await bot.send("pull_request", bot.pr_event("opened", head_sha=sha)) == 202
    await bot.wait_runs_done()

    [comment] = bot.bot_comments()
    page = inspect(comment.body)
    ours = ("https://github.com/", bot.fake.url)
    _assert_inert(page, "comment", ours)
    assert comment.body.count("<!--") == 1 and page.comments == [" paritybot:sticky "]
    # The failure is there, readable, its name and message in code.
    code = "".join(page.code_text)
    assert "test_hostile[<img src=x onerror=alert(1)></details><!\u200b-- paritybot:sticky -->]" in code
    assert "@octo-org/maintainers <img src=x onerror=alert(2)>" in code

    runs = {r.name: r for r in bot.fake.check_runs(REPO, head_sha=sha)}
    tests_run = runs["paritybot / tests (default)"]
    assert tests_run.states[-1]["conclusion"] == "failure"
    for run in runs.values():
        output = run.states[-1]["output"]
        for part in ("summary", "text"):
            if output.get(part):
                _assert_inert(inspect(output[part]), f"{run.name} {part}", ours)
                assert "<!--" not in output[part]
        for value in [
            output["title"],
            *(a.get(k, "") for a in run.annotations for k in ("message", "title")),
        ]:
            assert live_mentions(value) == [] and "<!--" not in value, (run.name, value)
    assert any("octo-org/maintainers" in a["message"] for a in tests_run.annotations)


# --- The probe: a PR that ships its own torch, metadata or standard library ---------------------

SPOOF = "2.3.0+SPOOFED"
SHADOW = f'raise SystemExit(print(\'{{"torch": "{SPOOF}", "python": "{SPOOF}"}}\'))\n'
TOOL = '#!/bin/sh\necho "99.9.9 SPOOFED"\necho "version 99.9.9"\n'  # as gcc -dumpversion, cmake --version'
IMAGE_PATH = "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # the test image's


def spoofing_workspace(root: Path) -> Path:
    """A checkout whose files try every way of changing what the probe reports."""
    for base in (root, root / SCRATCH_DIR):  # beside the workspace root, and where the probe used to be
        (base / "torch").mkdir(parents=True)
        (base / "torch" / "__init__.py").write_text(f'__version__ = "{SPOOF}"\n')
        dist = base / "torch-9.9.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {SPOOF}\n")
        for module in ("json", "platform", "sitecustomize", "usercustomize"):
            (base / f"{module}.py").write_text(SHADOW)
    # Tools the probe asks for their version, found through a relative PATH entry.
    (root / "bin").mkdir()
    for tool in ("gcc", "cmake", "nvidia-smi", "nvcc"):
        (root / "bin" / tool).write_text(TOOL)
        (root / "bin" / tool).chmod(0o755)
    return root


def spoofing_env(workspace: str, path: str) -> dict[str, str]:
    """An environment whose variables put the checkout on the paths: a config may well do that
    for its tests (``PYTHONPATH: src``), and the probe runs with the environment's variables."""
    return {"PYTHONPATH": workspace, "PATH": f"bin:{path}"}


def _assert_the_image_truth(facts: EnvFacts, python: str) -> None:
    assert facts.torch is None and "torch" in facts.missing, facts
    assert "torch" not in facts.packages, facts.packages
    assert facts.python == python
    assert "SPOOFED" not in str(facts) and "99.9.9" not in str(facts), facts
    # What people read: the parity table and the probe's package list say torch is not there.
    report = samples.all_green().model_copy(update={"probe": facts})
    report.parity = build_parity(None, facts, None, ["torch"])
    [torch_row] = [r for r in report.parity.rows if r.field == "torch"]
    assert torch_row.this_run is None
    rendered = render_comment(report, stage=Stage.DONE)
    rendered += "".join(o.title + o.summary + o.text for o in render_check_runs(report))
    assert SPOOF not in rendered and "9.9" not in rendered


async def test_the_probe_on_the_host_reads_the_interpreter_not_the_pr(tmp_path: Path) -> None:
    workspace = spoofing_workspace(tmp_path)
    path = HostRunner().info.env["PATH"]  # the python3 installed beside paritybot
    runner = HostRunner(reason="test", env=spoofing_env(str(workspace), path))
    facts = parse_probe(await runner.run(probe_step(["torch"]), workspace))
    python = subprocess.run(
        ["python3", "-I", "-c", "import platform; print(platform.python_version())"],
        env={"PATH": path},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    _assert_the_image_truth(facts, python)


@pytest.mark.docker
async def test_the_probe_in_a_container_reads_the_image_not_the_pr(
    docker_client: docker.DockerClient, test_image: str, tmp_path: Path
) -> None:
    workspace = spoofing_workspace(tmp_path)
    env = Environment(name="ci", image=test_image, gpus="none", env=spoofing_env(WORKSPACE_DIR, IMAGE_PATH))
    runner = DockerRunner(env, f"t-spoof-{uuid.uuid4().hex[:8]}", docker_client)
    try:
        facts = parse_probe(await runner.run(probe_step(["torch"]), workspace))
        # The next step sees the workspace as before: the probe only kept the PR's files away.
        asked = await runner.run(
            Step(
                name="ask",
                argv=[
                    "sh",
                    "-c",
                    "cat torch/__init__.py; python3 -I -c 'import platform; print(platform.python_version())'",
                ],
            ),
            workspace,
        )
    finally:
        await runner.close()
    shown, python = asked.output.strip().rsplit("\n", 1)
    assert SPOOF in shown  # the attack was there to be found
    _assert_the_image_truth(facts, python)


# --- Host-side reads: a PR's symbolic links to files of the bot's machine ---------------------------

MARK = "hostsecret_7f3a"
HOST_SECRET = f'def {MARK}():  # {MARK.upper()}\n    """{MARK}"""\n    return "{MARK}"\n'
CONFIG = "checks:\n  precommit: false\n"


def repo_with_links(tmp_path: Path) -> tuple[GitRepo, str, str, Path]:
    """A PR whose new files are links to a file of the host, where the bot reads files."""
    secret = tmp_path / "host" / "secret.py"
    secret.parent.mkdir()
    secret.write_text(HOST_SECRET)
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            ".github/paritybot.yml": CONFIG,
            "pkg/__init__.py": "",
            "pkg/core.py": "def double(x):\n    return 2 * x\n",
            "tests/test_core.py": "from pkg.core import double\n\n\ndef test_double():\n    assert double(2) == 4\n",
        }
    )
    (repo.path / "requirements").mkdir()
    for link in ("pkg/leak.py", "tests/test_leak.py", "requirements/dev.in", "tests/conftest_data.py"):
        (repo.path / link).symlink_to(secret)
    repo.git("add", "pkg/leak.py", "tests/test_leak.py", "requirements/dev.in", "tests/conftest_data.py")
    head = repo.commit({"pkg/core.py": "def double(x):\n    return x + x\n"}, "links to the host")
    return repo, base, head, secret


async def test_links_to_host_files_are_never_read_on_the_host(tmp_path: Path) -> None:
    repo, base, head, secret = repo_with_links(tmp_path)

    async def host(request: RunnerRequest) -> HostRunner:
        return HostRunner(reason="test", env={**tool_env(), **request.environment.env})

    with structlog.testing.capture_logs() as logs:
        report = await run_local_check(
            repo.path, base=base, head=head, runner_factory=host, work_dir=tmp_path / "work"
        )
    produced = [
        report.model_dump_json(),
        render_comment(report, stage=Stage.DONE),
        *(o.model_dump_json() for o in render_check_runs(report)),
        repr(logs),
    ]
    assert report.error is None, report.error
    assert report.docstrings is not None and report.tests is not None
    # The checks ran on the change (pkg/core.py) and said which files they did not read.
    assert "`pkg/leak.py`" in report.docstrings.message
    assert [r.nodeid for r in report.tests.results] == ["tests/test_core.py::test_double"]
    # The file's content appears nowhere: not in the report, the comment, the check runs or a log.
    for text in produced:
        assert MARK not in text.lower()
    assert str(secret) not in "".join(produced)  # nor where the link points


async def test_a_test_id_in_a_linked_file_is_refused_by_name(tmp_path: Path) -> None:
    """``/retest-gpu failed`` names ids from an earlier run; their file may be a link by now."""
    repo, _, head, _ = repo_with_links(tmp_path)
    leak, core = f"tests/test_leak.py::{MARK}", "tests/test_core.py::test_double"
    runner = HostRunner(reason="test", env=tool_env())
    run = await run_tests(
        runner, repo.path, [leak, core], TestSettings(), ReproContext(head_sha=head, repo="octo/calc")
    )
    by_id = {r.nodeid: r for r in run.results}
    assert by_id[core].outcome == TestOutcome.PASSED
    assert by_id[leak].outcome == TestOutcome.ERROR
    assert by_id[leak].message == (
        "not run: tests/test_leak.py is a symbolic link; only regular files of the commit are run"
    )


@pytest.mark.parametrize("selected", [True, False], ids=["a selection", "the whole suite"])
async def test_a_test_module_linked_to_the_host_is_never_imported(tmp_path: Path, selected: bool) -> None:
    """pytest collects the test roots; a link among them must not make it import a file of the host."""
    imported = tmp_path / "imported"
    host_module = tmp_path / "host" / "test_of_the_host.py"
    host_module.parent.mkdir()
    host_module.write_text(f"open({str(imported)!r}, 'w').close()\n\n\ndef test_host():\n    pass\n")
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"tests/test_core.py": "def test_core():\n    pass\n"})
    (repo.path / "tests" / "test_linked.py").symlink_to(host_module)
    repo.git("add", "tests/test_linked.py")
    head = repo.commit({}, "a link to a test module of the host")
    runner = HostRunner(reason="test", env=tool_env())
    nodeids = ["tests/test_core.py::test_core"] if selected else None

    run = await run_tests(
        runner, repo.path, nodeids, TestSettings(reruns=0), ReproContext(head_sha=head, repo="octo/calc")
    )

    assert [r.nodeid for r in run.results] == ["tests/test_core.py::test_core"]
    assert run.not_collected == []
    assert not imported.exists()


def test_a_linked_config_is_refused_by_name(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.yml"
    secret.write_text(f"# {MARK}\nchecks: {{precommit: false}}\n")
    repo = GitRepo(tmp_path / "repo")
    (repo.path / ".github").mkdir()
    (repo.path / ".github" / "paritybot.yml").symlink_to(secret)
    repo.git("add", ".github/paritybot.yml")
    head = repo.commit({}, "config is a link")
    with pytest.raises(UsageError, match=r"\.github/paritybot\.yml at \w+: is a symbolic link") as info:
        load_local_config(repo.path, head, None)
    assert MARK not in str(info.value) and str(secret) not in str(info.value)
