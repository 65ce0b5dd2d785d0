"""paritybot's pytest plugin for A/B benchmarks; injected as ``paritybot_perf_pytest.py``.

Loaded with ``-p`` by the driver (``paritybot_perf_driver.py``) in each side's pytest process;
the worker half it uses is ``paritybot_perf_worker.py``:

* It replaces pytest's run loop: after collection (and the project's own deselection) it tells the
  driver which tests use the ``benchmark`` fixture, and runs the ones the driver plans, in the
  plan's order.
* Its ``benchmark`` fixture takes the place of pytest-benchmark's and times nothing on its own: it
  says it is ready, then calibrates or runs one round of calls each time the driver asks, so that
  base and head take turns. A test that fails, on any phase, is reported as an error of its
  benchmark.

Plain pytest and standard library only; the project's pytest-benchmark need not be installed,
and when it is, its options in the project's ``addopts`` still parse.
"""

from __future__ import annotations

import os
import sys
import types

import paritybot_perf_worker as worker
import pytest


class BenchmarkFixture:
    """What a test sees as ``benchmark``: pytest-benchmark's call and ``pedantic`` forms."""

    def __init__(self, channel, name):
        self._channel = channel
        self.name = name
        self.extra_info = {}
        self.group = None
        self.called = False

    def _once(self):
        if self.called:
            raise RuntimeError("the benchmark fixture can be used only once per test")
        self.called = True

    def __call__(self, function, *args, **kwargs):
        self._once()
        result: list = []

        def call():
            result[:] = [function(*args, **kwargs)]

        worker.serve(self._channel, self.name, worker.timer(call))
        return result[0] if result else None

    def pedantic(self, target, args=(), kwargs=None, setup=None, rounds=1, warmup_rounds=0, iterations=1):
        # The driver decides the rounds and the warm-up; ``iterations`` calls make one round.
        self._once()
        if setup is not None and iterations != 1:
            raise ValueError("pedantic: iterations must be 1 when setup is given")
        fixed = (tuple(args), dict(kwargs or {}))
        result: list = []

        def prepare():
            made = setup() if setup is not None else None
            return made if made is not None else fixed

        def call(*a, **k):
            result[:] = [target(*a, **k)]

        worker.serve(self._channel, self.name, worker.timer(call, prepare), fixed_n=int(iterations))
        return result[0] if result else None


class _Run:
    """The state of the planned run: the channel, and what happened to the current test."""

    def __init__(self):
        self.channel = worker.Channel()
        self.fixture = None
        self.failures = []
        self.collect_errors = {}


_run = None


def _benchmark(request):
    if _run is None:
        pytest.skip("paritybot's benchmark fixture runs only under its driver")
    _run.fixture = BenchmarkFixture(_run.channel, request.node.nodeid)
    return _run.fixture


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    config.addinivalue_line("markers", "benchmark: pytest-benchmark's settings (ignored by paritybot)")
    # pytest-xdist would send the tests to other processes, which the driver cannot pair.
    if hasattr(config.option, "numprocesses"):
        config.option.numprocesses = None
        config.option.dist = "no"


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    global _run
    manager = session.config.pluginmanager
    # pytest-benchmark's own hooks would refuse our fixture (and skip it under --benchmark-skip);
    # its options stay parsed, so the project's addopts still work.
    for name in ("benchmark", "pytest-benchmark"):
        plugin = manager.get_plugin(name)
        if plugin is not None:
            manager.unregister(plugin)
    # Registered after every other plugin, so this ``benchmark`` fixture is the one tests get.
    holder = types.ModuleType("paritybot_perf_fixture")
    setattr(holder, "benchmark", pytest.fixture(name="benchmark")(_benchmark))  # noqa: B010
    manager.register(holder, "paritybot-perf-fixture")
    if os.environ.get(worker.FDS_VARIABLE):
        _run = _Run()


def pytest_collectreport(report):
    if _run is not None and report.failed:
        _run.collect_errors[report.nodeid] = _error_line(report.longreprtext)


def pytest_runtest_logreport(report):
    if _run is None:
        return
    if report.failed:
        # The exception line (pytest's "reprcrash") says what broke; the last lines where there is none.
        crash = getattr(getattr(report.longrepr, "reprcrash", None), "message", None)
        _run.failures.append(f"{report.when} failed: {crash or _last_lines(report.longreprtext)}")
    elif report.skipped and (_run.fixture is None or not _run.fixture.called):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _run.failures.append(str(reason))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    if _run is None or session.config.option.collectonly:
        return None
    items = {item.nodeid: item for item in session.items}
    # The driver hears what this side has, then says what to run: the benchmarks both sides have.
    names = [n for n, i in items.items() if _uses_benchmark_fixture(i)]
    # What failed to collect is said too: a benchmark module that does not import on either side
    # would otherwise drop out of the comparison unseen.
    broken = dict(list(_run.collect_errors.items())[:10])
    _run.channel.send(ev="collected", names=names, foreign=worker.foreign_imports(), broken=broken)
    planned = _run.channel.receive().get("names", [])
    for index, name in enumerate(planned):
        item = items.get(name)
        if item is None:
            _run.channel.send(ev="error", name=name, message=_not_collected(name, _run.collect_errors))
        else:
            later = [items[n] for n in planned[index + 1 :] if n in items]
            _run.fixture, _run.failures = None, []
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=later[0] if later else None)
            if _run.failures:
                _run.channel.send(ev="error", name=name, message=worker.clip("; ".join(_run.failures)))
            elif _run.fixture is None or not _run.fixture.called:
                _run.channel.send(
                    ev="error", name=name, message="the test did not call the benchmark fixture"
                )
        _run.channel.send(ev="done", name=name)
    # Every fixture is torn down (the last test ran with no next item). The rest of pytest's session
    # (summaries, other plugins' reports) measures nothing and can take seconds per process.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _uses_benchmark_fixture(item):
    """Whether the test takes the ``benchmark`` fixture; a parametrize argument that happens to be
    named ``benchmark`` is listed among the fixture names too, and is not one."""
    if "benchmark" not in getattr(item, "fixturenames", ()):
        return False
    callspec = getattr(item, "callspec", None)
    # pytest < 8 keeps direct parametrize values in ``funcargs``; later versions in ``params``.
    given = {**getattr(callspec, "funcargs", {}), **getattr(callspec, "params", {})} if callspec else {}
    return "benchmark" not in given


def _not_collected(name, collect_errors):
    path = name.split("::")[0]
    for where, error in collect_errors.items():
        if where == path or name.startswith(where + "::"):
            return "not collected on this side: " + error
    return "not collected on this side"


def _error_line(text):
    """The line that says what went wrong: pytest's last ``E`` line, else the last line."""
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    marked = [line[1:].strip() for line in lines if line.startswith("E ")]
    return worker.clip((marked or lines or ["(no message)"])[-1])


def _last_lines(text, count=12):
    return worker.clip("\n".join(str(text).strip().splitlines()[-count:]))
