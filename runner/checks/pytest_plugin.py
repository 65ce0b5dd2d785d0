"""paritybot's pytest plugin, injected into every test run (``-p paritybot_pytest``).

It uses the standard library and pytest (7 or later) only and stays valid on Python 3.8, since it
runs in the project's own environment.

- Each test's exact node id goes into the JUnit report as a property: JUnit's classname and name
  cannot carry it (:mod:`runner.checks.junit`).
- With ``--paritybot-selection FILE`` (node ids, one per line), pytest collects the suite and
  keeps the tests those ids name: a file, a class, a function (with all its parameters) or one
  parametrized case. The rest are *deselected*, through pytest's own hook, so every count — pytest's
  summary line and paritybot's — is in test items, the unit pytest runs and reports.
- A selected id that names nothing in the suite is listed, never run: the test was renamed or
  removed. One in a module that failed to collect is not: that module's collection error says
  why. A module outside the selection that cannot even be collected (an optional dependency
  missing) is no error of this run: it is left out and listed once (pytest may collect it twice,
  as tests and as doctests), so it is neither a failure nor silence.
- With ``--paritybot-order FILE`` (node ids, one per line, most likely to fail first), the kept
  tests run in that order: each at the place of the first id that names it, pytest's own order
  among equals and after them. Which tests run never changes (:mod:`runner.checks.ordering`).
- With ``--paritybot-live FILE``, each result is appended there as it happens (JSON lines: the
  number of tests once collected, then one line per finished test, naming a failure), for the bot
  to show the first failure while the rest still run (:mod:`runner.checks.streaming`).
- With ``--paritybot-counts FILE``, what was selected, deselected and left out is written there as
  JSON once collection is done.
- With ``--paritybot-timeout SECONDS``, pytest-timeout, when the environment has it, stops a test
  that runs longer. Whether it is there is found out here, in pytest's own interpreter, instead of
  starting another one to ask.

Symbolic links are never collected: a link committed in the pull request may point anywhere on the
machine, and on the host runner pytest would import that file.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

NODEID_PROPERTY = "paritybot.nodeid"
MAX_LISTED = 200

if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
    # pytest does not load installed plugins then; pytest-timeout is loaded with this one.
    try:
        import pytest_timeout  # noqa: F401
    except ImportError:
        pass
    else:
        pytest_plugins = ["pytest_timeout"]


class _State:
    def __init__(self) -> None:
        self.selection: set[str] | None = None  # None: no selection, every collected test runs
        self.places: tuple[str, ...] = ()  # the files and directories the selected ids are in
        self.matched: set[str] = set()
        self.deselected = 0
        self.not_collected: list[dict[str, str]] = []
        self.failed_places: set[str] = set()  # collectors that failed: what they hold is not "not found"
        self.root = ""  # where pytest was started: the selected ids are relative to it
        self.order: dict[str, int] = {}  # node id → its place in the order file
        self.live: Any = None  # the open live file, when asked for
        self.failed: set[str] = set()


_STATE = _State()


def pytest_addoption(parser):
    group = parser.getgroup("paritybot")
    group.addoption("--paritybot-selection", default=None, help="run only the tests these node ids name")
    group.addoption("--paritybot-counts", default=None, help="write the run's counts here (JSON)")
    group.addoption("--paritybot-live", default=None, help="append each result here as it happens")
    group.addoption(
        "--paritybot-order", default=None, help="run the tests these node ids name first, in order"
    )
    group.addoption("--paritybot-timeout", type=float, default=None, help="per-test timeout (pytest-timeout)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    timeout = config.getoption("paritybot_timeout")
    plugins = config.pluginmanager
    if timeout is not None and (plugins.hasplugin("timeout") or plugins.hasplugin("pytest_timeout")):
        # Before pytest-timeout reads its option, and over the project's own setting, as
        # `--timeout` on the command line would be.
        config.option.timeout = timeout
    path = config.getoption("paritybot_selection")
    if path:
        with open(path, encoding="utf-8") as fh:
            ids = [line.strip() for line in fh if line.strip()]
        _STATE.selection = {i if "::" in i else i.rstrip("/") for i in ids}
        _STATE.places = tuple(sorted({i.split("::")[0].rstrip("/") for i in ids}))
        _STATE.root = str(config.invocation_params.dir)
    live = config.getoption("paritybot_live")
    if live:
        _STATE.live = open(live, "w", encoding="utf-8")  # noqa: SIM115  (open for the whole session)
    order = config.getoption("paritybot_order")
    if order:
        with open(order, encoding="utf-8") as fh:
            ids = [line.strip() for line in fh if line.strip()]
        for place, nodeid in enumerate(ids):
            _STATE.order.setdefault(nodeid if "::" in nodeid else nodeid.rstrip("/"), place)
        _STATE.root = str(config.invocation_params.dir)


def _relative(path) -> str:
    """A collected path as the selected ids name it: relative to where pytest was started. (Node ids
    are relative to pytest's rootdir, which a project's config may put elsewhere.)"""
    return os.path.relpath(str(path), _STATE.root).replace(os.sep, "/")


def _in_selected_place(place: str) -> bool:
    """Whether a collector at ``place`` holds, or is inside, a selected file or directory."""
    for selected in _STATE.places:
        if place in (".", selected) or selected.startswith(place + "/") or place.startswith(selected + "/"):
            return True
    return False


def pytest_ignore_collect(collection_path, config):
    if os.path.islink(str(collection_path)):
        return True
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if _STATE.selection is None or not report.failed:
        return
    place = _relative(collector.path)
    _STATE.failed_places.add(place)
    if _in_selected_place(place):
        return
    outcome.force_result(pytest.CollectReport(report.nodeid, "passed", None, []))
    if any(seen["path"] == report.nodeid for seen in _STATE.not_collected):
        return  # the same file again, as a doctest module (--doctest-modules)
    lines = [line for line in str(report.longrepr).splitlines() if line.strip()]
    _STATE.not_collected.append({"path": report.nodeid, "message": (lines[-1] if lines else "")[:300]})


def _names(nodeid: str):
    """The ids that select ``nodeid``: itself, without its parameters, each parent, each directory."""
    yield nodeid
    base = nodeid.split("[", 1)[0]
    yield base
    parts = base.split("::")
    for end in range(len(parts) - 1, 0, -1):
        yield "::".join(parts[:end])
    path = parts[0]
    while "/" in path:
        path = path.rsplit("/", 1)[0]
        yield path


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    for item in items:
        item.user_properties.append((NODEID_PROPERTY, item.nodeid))
    if _STATE.selection is not None:
        _keep_selected(config, items, _STATE.selection)
    if _STATE.order:
        items[:] = sorted(items, key=_place)  # stable: pytest's order among equals


def _place(item) -> int:
    rest = item.nodeid.split("::", 1)[1:]
    places = [_STATE.order[n] for n in _names("::".join([_relative(item.path), *rest])) if n in _STATE.order]
    return min(places) if places else len(_STATE.order)


def _keep_selected(config, items, selection: set[str]) -> None:
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        rest = item.nodeid.split("::", 1)[1:]
        hits = [n for n in _names("::".join([_relative(item.path), *rest])) if n in selection]
        _STATE.matched.update(hits)
        (keep if hits else drop).append(item)
    items[:] = keep
    if drop:
        config.hook.pytest_deselected(items=drop)


def pytest_deselected(items):
    _STATE.deselected += len(items)


def _live(entry) -> None:
    if _STATE.live is not None:
        _STATE.live.write(json.dumps(entry) + "\n")
        _STATE.live.flush()


def pytest_runtest_logreport(report):
    if _STATE.live is None:
        return
    if report.failed and report.nodeid not in _STATE.failed:
        _STATE.failed.add(report.nodeid)
        lines = [line for line in str(report.longrepr).splitlines() if line.strip()]
        entry = {"failed": report.nodeid, "message": "\n".join(lines[-3:])[-500:]}
        line = _line_in_own_file(report)
        if line is not None:
            entry["line"] = line
        _live(entry)
    if report.when == "teardown":
        _live({"done": 1})


def _line_in_own_file(report):
    """The line of the test's own file nearest the failure: its last frame there, else the test's
    definition. The message keeps only the error's last lines, which name the library's frame when
    the library raised."""
    path = report.location[0]
    found = None
    for entry in getattr(getattr(report.longrepr, "reprtraceback", None), "reprentries", None) or []:
        where = getattr(entry, "reprfileloc", None)
        if where is None:
            continue
        frame = os.path.normpath(str(where.path))
        if frame == os.path.normpath(path) or frame.endswith(os.sep + os.path.normpath(path)):
            found = where.lineno
    if found is None and isinstance(report.location[1], int):
        found = report.location[1] + 1
    return found


def pytest_collection_finish(session):
    _live({"total": len(session.items)})
    path = session.config.getoption("paritybot_counts")
    if not path:
        return
    # A selected id in a module that did not collect is that module's collection error, reported
    # as such, not a test the commit lacks.
    not_found = sorted(
        n
        for n in (_STATE.selection or set()) - _STATE.matched
        if not any(n == p or n.startswith(p + "::") or n.startswith(p + "/") for p in _STATE.failed_places)
    )
    counts = {
        "selected": len(session.items),
        "deselected": _STATE.deselected,
        "not_found": not_found[:MAX_LISTED],
        "not_collected": _STATE.not_collected[:MAX_LISTED],
    }
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(counts, fh)
