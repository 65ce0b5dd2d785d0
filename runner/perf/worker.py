"""The worker half of paritybot's A/B benchmark driver: runs inside each side's benchmark process.

Standard library only, valid on Python 3.8. Injected as ``paritybot_perf_worker.py`` beside the
driver (``paritybot_perf_driver.py``); the pytest plugin and the asv worker import it. It speaks to
the driver over two pipes (JSON lines) and times only when the driver asks, one round at a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

with contextlib.suppress(ImportError):  # not on every system; then no round is known to be preempted
    import resource

MAX_MESSAGE = 2000
FDS_VARIABLE = "PARITYBOT_PERF_FDS"
PATHS_VARIABLE = "PARITYBOT_PERF_PATHS"
CALIBRATE_S = 0.002


class Channel:
    """The worker's end of the two pipes the driver opened; JSON lines both ways."""

    def __init__(self):
        read_fd, write_fd = (int(fd) for fd in os.environ[FDS_VARIABLE].split(","))
        self._read = os.fdopen(read_fd, "r", encoding="utf-8")
        self._write = write_fd

    def send(self, **message):
        data = (json.dumps(message) + "\n").encode("utf-8")
        while data:
            data = data[os.write(self._write, data) :]

    def receive(self):
        line = self._read.readline()
        return json.loads(line) if line else {"cmd": "stop"}


def _cuda_sync():
    # Asynchronous GPU work must be finished inside the timed interval; only a process that has
    # already initialised CUDA can have any in flight, so nothing is imported or initialised here.
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
        except Exception:
            pass


def _preemptions():
    """How often the scheduler has taken the CPU from this thread so far (Linux; 0 elsewhere)."""
    try:
        return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
    except (AttributeError, NameError, OSError):
        return 0


def timer(call, setup=None):
    """``timed(n)``: (seconds for ``n`` calls of ``call``, GPU work included; whether the scheduler
    took the CPU away meanwhile). ``setup`` runs untimed."""

    def timed(n):
        args = setup() if setup is not None else None
        _cuda_sync()
        before = _preemptions()
        start = time.perf_counter()
        if args is None:
            for _ in range(n):
                call()
        else:
            for _ in range(n):
                call(*args[0], **args[1])
        _cuda_sync()
        elapsed = time.perf_counter() - start
        return elapsed, _preemptions() != before

    return timed


def serve(channel, name, timed, fixed_n=None):
    """Say ready, then calibrate or time one round per command, until told to stop.

    The driver sends the commands to one process at a time, so no two processes ever time at once,
    calibration included.
    """
    channel.send(ev="ready", name=name)
    while True:
        command = channel.receive()
        if command.get("name", name) != name:
            continue  # a stop meant for an earlier benchmark that ended in an error
        what = command.get("cmd")
        if what == "calibrate":
            n, (elapsed, _) = 1, timed(1)
            while fixed_n is None and elapsed < CALIBRATE_S and n < 10**6:
                n *= 10
                elapsed, _ = timed(n)
            # The fastest of three: a neighbour can only make a try slower.
            elapsed = min([elapsed] + [timed(n)[0] for _ in range(2)])
            channel.send(ev="calibrated", name=name, estimate=elapsed / n, fixed=fixed_n)
        elif what == "run":
            calls = fixed_n or int(command["n"])
            rounds = [timed(calls) for _ in range(max(1, int(command.get("rounds", 1))))]
            times = [elapsed for elapsed, _ in rounds]
            channel.send(ev="rounds", name=name, times=times, n=calls, preempted=[p for _, p in rounds])
        else:
            return


def foreign_imports():
    """This side's own modules that were imported from elsewhere (an installed copy), with where.

    A package that exists in the checkout but comes from site-packages would make both sides run
    the same code, and a "no difference" that means nothing.
    """
    roots = [os.path.realpath(p) for p in os.environ.get(PATHS_VARIABLE, "").split(os.pathsep) if p]
    inside = tuple(root + os.sep for root in roots)
    found = set()
    # A src layout whose src/ is not on the side's paths is the usual way to import an installed copy.
    for root in roots + [os.path.join(r, "src") for r in roots]:
        try:
            entries = os.listdir(root)
        except OSError:
            continue
        for entry in entries:
            name = entry[:-3] if entry.endswith(".py") else entry
            if not (entry.endswith(".py") or os.path.isfile(os.path.join(root, entry, "__init__.py"))):
                continue
            where = getattr(sys.modules.get(name), "__file__", None)
            if where and not os.path.realpath(where).startswith(inside):
                found.add(f"{name} from {where}")
    return sorted(found)[:20]


def clip(text, limit=MAX_MESSAGE):
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(exc):
    text = f"{type(exc).__name__}: {exc}"
    return text[:MAX_MESSAGE]


def selected(name, names):
    """Whether a selection (None: everything) takes this benchmark: by its name, or by a file or a
    test that contains it (``tests/test_x.py`` takes ``tests/test_x.py::test_y[1]``)."""
    if names is None:
        return True
    return any(name == n or name.startswith(n + "::") or name.startswith(n + "[") for n in names)
