"""The RFC checklist: each trigger, ticking items from the PR description, and gathering from git."""

from __future__ import annotations

from pathlib import Path

import pytest
from gitrepo import GitRepo

from bot.core.config import DEFAULT_CHECKLIST, RfcSettings
from runner.checks.api_surface import ApiChange, ApiChangeKind, ObjectKind
from runner.checks.rfc import collect_rfc_inputs, evaluate_rfc, is_dependency_file, new_dependencies_between
from runner.gitdiff import ChangedFile, FileStatus


def small_change(path: str = "pkg/util.py") -> list[ChangedFile]:
    return [ChangedFile(path=path, status=FileStatus.MODIFIED, additions=3, deletions=1)]


def evaluate(
    settings: RfcSettings | None = None,
    changed: list[ChangedFile] | None = None,
    labels: list[str] | None = None,
    body: str = "",
    api: list[ApiChange] | None = None,
    deps: list[str] | None = None,
):
    return evaluate_rfc(
        settings or RfcSettings(), changed or small_change(), labels or [], body, api or [], deps or []
    )


REMOVAL = ApiChange(
    kind=ApiChangeKind.REMOVED,
    qualname="pkg.mod.old_fn",
    object_kind=ObjectKind.FUNCTION,
    description="removes public function `pkg.mod.old_fn`",
)


def test_an_ordinary_pr_does_not_trigger() -> None:
    report = evaluate(labels=["bug"])
    assert not report.triggered
    assert report.reasons == [] and report.items == []


def test_each_trigger_gives_a_readable_reason() -> None:
    settings = RfcSettings(paths=["torch/csrc/**", "docs/*"], max_lines_changed=100)
    changed = [
        ChangedFile(path="torch/csrc/autograd/engine.cpp", additions=80, deletions=30),
        ChangedFile(path="pkg/util.py", additions=1, deletions=0),
    ]
    report = evaluate(settings, changed, ["RFC", "bug"], api=[REMOVAL], deps=["requests>=2"])

    assert report.triggered
    assert report.reasons == [
        "touches `torch/csrc/**` (design-reviewed path)",
        "has the label `RFC`",
        "changes 111 lines (more than 100)",
        "adds dependency `requests>=2`",
        "removes public function `pkg.mod.old_fn`",
    ]


def test_triggers_can_be_switched_off() -> None:
    settings = RfcSettings(new_dependencies=False, public_api=False, max_lines_changed=None, labels=[])
    huge = [ChangedFile(path="a.py", additions=50_000, deletions=0)]
    assert not evaluate(settings, huge, ["rfc"], api=[REMOVAL], deps=["numpy"]).triggered


def test_renamed_files_match_path_globs_on_either_side() -> None:
    moved = [ChangedFile(path="elsewhere/x.py", old_path="core/x.py", status=FileStatus.RENAMED)]
    assert evaluate(RfcSettings(paths=["core/*"]), moved).reasons == [
        "touches `core/*` (design-reviewed path)"
    ]


def test_many_api_changes_are_summarised() -> None:
    changes = [
        REMOVAL.model_copy(update={"description": f"removes public function `m.f{i}`"}) for i in range(14)
    ]
    reasons = evaluate(api=changes).reasons
    assert len(reasons) == 11
    assert reasons[-1] == "…and 4 more breaking public API changes"


def test_checkboxes_tick_items_by_their_leading_words() -> None:
    body = """
Some text.

- [x] Motivation
- [X] **Alternatives considered**: we tried a C++ version first.
* [ ] Backward compatibility and migration path
1. [x] Impact on downstream: none, nothing imports this.
- [x] Link to the RFC (will add later)
- [x] Unrelated box
"""
    report = evaluate(labels=["rfc"], body=body)

    assert [(i.text, i.done) for i in report.items] == [
        (DEFAULT_CHECKLIST[0], True),
        (DEFAULT_CHECKLIST[1], True),
        (DEFAULT_CHECKLIST[2], False),
        (DEFAULT_CHECKLIST[3], True),
        (DEFAULT_CHECKLIST[4], False),  # a ticked box is not a link
    ]
    assert report.rfc_link is None
    assert not report.complete


def test_rfc_link_ticks_the_link_item_and_all_done_is_complete() -> None:
    body = (
        "- [x] Motivation: faster kernels\n"
        "- [x] Alternatives considered\n"
        "- [x] Backward compatibility: no change for users\n"
        "- [x] Impact on downstream projects\n"
        "Design: https://github.com/pytorch/rfcs/pull/42\n"
    )
    report = evaluate(labels=["needs-rfc"], body=body)

    assert report.rfc_link == "https://github.com/pytorch/rfcs/pull/42"
    assert all(item.done for item in report.items)
    assert report.complete


def test_custom_checklist_and_link_pattern() -> None:
    settings = RfcSettings(checklist=["Benchmarks attached", "Design doc link"], link_pattern=r"DOC-\d+")
    report = evaluate(settings, labels=["rfc"], body="- [x] benchmarks attached\nSee DOC-7.")
    assert [i.done for i in report.items] == [True, True]
    assert report.rfc_link == "DOC-7"


def test_an_invalid_link_pattern_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="link_pattern"):
        evaluate(RfcSettings(link_pattern="(unclosed"), labels=["rfc"])


# --- Dependencies ----------------------------------------------------------------------------------


def test_new_dependencies_in_pyproject() -> None:
    old = """
[project]
name = "x"
dependencies = ["numpy>=1.26", "Typing_Extensions"]
[project.optional-dependencies]
test = ["pytest>=8"]
"""
    new = """
[project]
name = "x"
dependencies = ["numpy>=2", "typing-extensions", "requests>=2.31", "pytest"]
[project.optional-dependencies]
test = ["pytest>=8", "hypothesis"]
docs = ["sphinx"]
[dependency-groups]
dev = ["ruff"]
"""
    assert new_dependencies_between(old, new, "pyproject.toml") == [
        "requests>=2.31",
        "pytest",  # moved from an extra into the runtime dependencies
        "hypothesis (optional: test)",
        "sphinx (optional: docs)",
        "ruff (group: dev)",
    ]
    assert new_dependencies_between(None, '[project]\ndependencies = ["a"]', "pyproject.toml") == ["a"]
    with pytest.raises(ValueError, match="not valid TOML"):
        new_dependencies_between(old, "[project\n", "pyproject.toml")


def test_new_dependencies_in_requirements_and_setup_cfg() -> None:
    old_req = "numpy==1.26  # pinned\n-r base.txt\n"
    new_req = (
        "numpy==2.0\n-r base.txt\n--index-url https://example.org/simple\n"
        "scipy>=1.11 ; python_version >= '3.11' \\\n    # continued\n"
        "-e git+https://github.com/org/tool.git#egg=tool\n"
        "mylib @ https://example.org/mylib.whl\n"
        "# a comment\n"
    )
    assert new_dependencies_between(old_req, new_req, "requirements-dev.txt") == [
        "scipy>=1.11 ; python_version >= '3.11'",
        "tool",
        "mylib @ https://example.org/mylib.whl",
    ]
    old_cfg = "[options]\ninstall_requires =\n    numpy\n"
    new_cfg = (
        "[options]\ninstall_requires =\n    numpy\n    pyyaml>=6\n[options.extras_require]\ngpu =\n    cupy\n"
    )
    assert new_dependencies_between(old_cfg, new_cfg, "setup.cfg") == ["pyyaml>=6", "cupy (optional: gpu)"]


def test_dependency_files_are_recognised() -> None:
    for path in [
        "pyproject.toml",
        "sub/setup.cfg",
        "requirements.txt",
        "requirements-gpu.txt",
        "requirements/ci.in",
    ]:
        assert is_dependency_file(path), path
    for path in ["setup.py", "docs/requirements.md", "notes.txt"]:
        assert not is_dependency_file(path), path


# --- From git ----------------------------------------------------------------------------------------


def test_collect_rfc_inputs_from_a_real_repository(tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    base = repo.commit(
        {
            "pkg/mod.py": "def old_fn(x):\n    return x + 1\n\n\ndef keep(a, b=1):\n    return a\n",
            "pkg/moved.py": "def travel(q):\n    return q * 3\n",
            "tests/test_mod.py": "def test_it():\n    pass\n",
            "pyproject.toml": '[project]\nname = "pkg"\ndependencies = ["numpy"]\n',
        }
    )
    repo.git("checkout", "-q", "-b", "feature")
    head = repo.commit(
        {
            "pkg/mod.py": "def keep(a):\n    return a\n",
            "pkg/moved.py": None,
            "pkg/other.py": "def travel(q):\n    return q * 3\n",
            "tests/test_mod.py": None,
            "pyproject.toml": '[project]\nname = "pkg"\ndependencies = ["numpy", "requests"]\n',
        }
    )

    changed, api_changes, deps = collect_rfc_inputs(repo.path, "main", head)

    assert {f.path for f in changed} == {"pkg/mod.py", "pkg/other.py", "tests/test_mod.py", "pyproject.toml"}
    assert [(c.description, c.path) for c in api_changes] == [
        ("removes public function `pkg.mod.old_fn`", "pkg/mod.py"),
        ("removes parameter `b` from `pkg.mod.keep()`", "pkg/mod.py"),
        ("renames public function `pkg.moved.travel` → `pkg.other.travel`", "pkg/other.py"),
    ]
    assert deps == ["requests"]
    report = evaluate_rfc(RfcSettings(), changed, [], "", api_changes, deps)
    assert report.triggered and "adds dependency `requests`" in report.reasons
    assert base != head
