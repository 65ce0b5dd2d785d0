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


CPU_BOUND = 0.9  # of a round's wall time spent on the CPU: code that computes, not waits


def choose_clock(cpu_share, cpus, cuda):
    """The clock a benchmark's rounds are read with, the same on both sides.

    ``cpu_share``: per side, the largest share any calibration try of its processes spent on the
    CPU of the time it could run (its wall time less the time it waited for a CPU); ``cpus``: the CPUs the processes are pinned to; ``cuda``: whether a process of
    either side has initialised CUDA.

    * ``cuda``: CUDA events around the round, the device synchronised before and after: the GPU's
      own time, which a busy host CPU does not stretch.
    * ``cpu``: the process's CPU time, for code that computes on one CPU (both sides at least
      ``CPU_BOUND`` of a try on the CPU): a round the scheduler interrupts counts only what the
      code itself ran, so a busy machine no longer turns one round in three into noise.
    * ``wall``: anything that waits (a sleep, I/O, another process) or runs on several CPUs, where
      CPU time would miss what a user waits for.
    """
    if cuda:
        return "cuda"
    if cpus is None or len(cpus) != 1:
        return "wall"
    return "cpu" if all(cpu_share.get(side, 0.0) >= CPU_BOUND for side in ("base", "head")) else "wall"


def usable_cpus(cgroup="/sys/fs/cgroup"):
    """How many CPUs the run may use at once: those it may be scheduled on, fewer where a CPU
    quota (a container's ``--cpus``: cgroup v2's ``cpu.max``, or v1's CFS quota) allows less."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    for quota_file, period_file in (("cpu.max", None), ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us")):
        try:
            with open(os.path.join(cgroup, quota_file), encoding="ascii") as fh:
                fields = fh.read().split()
            if period_file:
                with open(os.path.join(cgroup, period_file), encoding="ascii") as fh:
                    fields.append(fh.read().strip())
            quota, period = int(fields[0]), int(fields[1])
        except (OSError, ValueError, IndexError):
            continue  # no such file, or "max": no quota
        if quota > 0 and period > 0:
            count = min(count, -(-quota // period))
        break
    return max(1, count)


def _torch_cuda():
    # Only a process that has already initialised CUDA can have GPU work in flight, so nothing is
    # imported or initialised here.
    torch = sys.modules.get("torch")
    try:
        return torch.cuda if torch is not None and torch.cuda.is_initialized() else None
    except Exception:
        return None


def _cuda_sync():
    cuda = _torch_cuda()
    if cuda is not None:
        with contextlib.suppress(Exception):
            cuda.synchronize()


def uses_cuda():
    return _torch_cuda() is not None


def _preemptions():
    """How often the scheduler has taken the CPU from this thread so far (Linux; 0 elsewhere)."""
    try:
        return resource.getrusage(resource.RUSAGE_THREAD).ru_nivcsw
    except (AttributeError, NameError, OSError):
        return 0


def _runqueue_wait():
    """Seconds this thread has waited for a CPU while runnable (Linux's schedstat; 0 elsewhere):
    time a busy machine took, as opposed to time the code chose to wait."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def timer(call, setup=None):
    """``timed(n, clock)``: (seconds for ``n`` calls of ``call`` on ``clock`` — ``wall``, ``cpu`` or
    ``cuda``, see :func:`choose_clock` — GPU work included; whether the scheduler took the CPU away
    meanwhile; the share of the wall time spent on the CPU). ``setup`` runs untimed."""

    def loop(n, args):
        if args is None:
            for _ in range(n):
                call()
        else:
            for _ in range(n):
                call(*args[0], **args[1])

    def timed(n, clock="wall"):
        args = setup() if setup is not None else None
        cuda = _torch_cuda() if clock == "cuda" else None
        events = (cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)) if cuda else None
        _cuda_sync()
        before, queued = _preemptions(), _runqueue_wait()
        cpu_start, start = time.process_time(), time.perf_counter()
        if events:
            events[0].record()
        loop(n, args)
        if events:
            events[1].record()
        _cuda_sync()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        # The share of the time it could run that the code spent on the CPU: near 1 for code that
        # computes however busy the machine, low for code that sleeps or waits for I/O.
        could_run = wall - (_runqueue_wait() - queued)
        share = min(1.0, cpu / could_run) if could_run > 0 else 1.0
        elapsed = {"cpu": cpu, "wall": wall}.get(clock, wall)
        if events:
            elapsed = events[0].elapsed_time(events[1]) / 1000.0  # milliseconds
        return elapsed, _preemptions() != before, share

    return timed


def serve(channel, name, timed, fixed_n=None):
    """Say ready, then calibrate or time one round per command, until told to stop.

    The driver sends the commands to one process at a time, so no two processes ever time at once,
    calibration included.
    """
    channel.send(ev="ready", name=name)
    ran = False
    while True:
        command = channel.receive()
        if command.get("name", name) != name:
            continue  # a stop meant for an earlier benchmark that ended in an error
        what = command.get("cmd")
        ran = ran or what in ("calibrate", "run")
        if what == "calibrate":
            n, tries = 1, [timed(1)]
            while fixed_n is None and tries[-1][0] < CALIBRATE_S and n < 10**6:
                n *= 10
                tries = [timed(n)]
            tries += [timed(n) for _ in range(2)]
            # The fastest of three: a neighbour can only make a try slower; the largest CPU share:
            # a try the scheduler did not interrupt shows whether the code computes or waits.
            channel.send(
                ev="calibrated",
                name=name,
                estimate=min(t[0] for t in tries) / n,
                fixed=fixed_n,
                cpu_share=max(t[2] for t in tries),
                cuda=uses_cuda(),
            )
        elif what == "run":
            calls = fixed_n or int(command["n"])
            clock = command.get("clock", "wall")
            rounds = [timed(calls, clock) for _ in range(max(1, int(command.get("rounds", 1))))]
            times = [r[0] for r in rounds]
            channel.send(ev="rounds", name=name, times=times, n=calls, preempted=[r[1] for r in rounds])
        else:
            if not ran:
                # A process the benchmark ended before its turn (it did not calibrate, or joined
                # late): the code still runs once, untimed, so what the test does with its result
                # after the benchmark works as in any other process.
                timed(1)
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
