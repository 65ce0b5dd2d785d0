"""paritybot's A/B benchmark driver, run inside the run's image beside two checkouts.

Standard library only, valid on Python 3.8. Injected by paritybot as ``paritybot_perf_driver.py``
next to its helpers (``paritybot_perf_worker``: the half that runs inside each benchmark process;
``paritybot_perf_asv``: asv suites; ``paritybot_perf_process``: one process as the driver sees it;
``paritybot_perf_command``: what a command prints) and ``paritybot_perf_pytest.py`` (the pytest
plugin)::

    python3 -I paritybot_perf_driver.py SPEC OUT     compare base and head as SPEC says, write OUT
    python3 paritybot_perf_driver.py asv-worker DIR  (internal) one side's asv benchmarks
    python3 paritybot_perf_driver.py pytest-worker … (internal) one side's pytest, with the plugin

SPEC (JSON) names the two checkouts (``sides.base``/``sides.head``: ``root``, ``paths`` put on
``PYTHONPATH`` relative to the root, ``python``), the benchmark kinds to run (``pytest``: pytest
tests that use the ``benchmark`` fixture; ``asv``: an asv suite; ``command``: a command that prints
the JSON shape of docs/performance.md) and the measuring plan (rounds, warm-up, time per round).

Each side runs in processes of its own, started in its own checkout with its own paths first on
``sys.path``, so ``import yourpackage`` means that side's code. For pytest and asv one process per
side stays parked inside each benchmark while the driver asks the two in turn for one *round* (the
same number of calls on both sides), alternating which side goes first: base, head, head, base …
Warm-up rounds are discarded. Only the driver decides when anything is timed, so drift and noisy
neighbours fall on both sides of every pair of rounds alike. A command is run once per round and
side; its own samples' median is the round's value.

(About 700 lines: the measuring loop, its process bookkeeping and the run's guards read best in one
place; what need not be here is in the helpers.)

OUT (JSON) holds, per benchmark, the per-call time of each round on each side and which side went
first, or the error that stopped it; paritybot's statistics (runner/perf/stats.py) read it.

Longer than most modules: it is the one file the driver's process runs, in the run's image, on the
standard library alone; what could be split out already was (the helpers named above).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time

# Run with ``python3 -I``, which leaves the script's directory off the path: its helpers lie there,
# and nothing else of the run does.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from paritybot_perf_asv import ConfigError, asv_benchmark_dir, asv_worker
from paritybot_perf_command import parse_command_output
from paritybot_perf_guard import Guard, become, harness_changes, side_users
from paritybot_perf_process import Worker
from paritybot_perf_sequential import decisive, estimate, first_pairs, look_budgets
from paritybot_perf_worker import PATHS_VARIABLE, choose_clock, selected, usable_cpus
from paritybot_perf_worker import clip as _clip

VERSION = 1
SIDES = ("base", "head")
MAX_NAME = 300
MAX_BENCHMARKS = 500
COMMAND_OUTPUT_MAX = 4 << 20
SCRIPT = os.path.abspath(__file__)
LIB_DIR = os.path.dirname(SCRIPT)  # the driver's modules, and nothing of the run's
# The plugin replaces the ``benchmark`` fixture and the run loop; no cache is written into a checkout.
PYTEST_OPTIONS = ("-p", "paritybot_perf_pytest", "-p", "no:cacheprovider")
TURN_S = 0.01  # one process's share of the CPU at a time: several short rounds
PHASES = ("start", "set_up", "measure", "grow", "finish")


def _side_env(spec, side, lib_dir):
    spec_side = spec["sides"][side]
    paths = [os.path.join(spec_side["root"], p) for p in spec_side.get("paths", ["."])]
    src = os.path.join(spec_side["root"], "src")
    if os.path.isdir(src) and not os.path.islink(src) and src not in paths:
        # A src layout: the side's own package, ahead of any the environment puts on the path
        # (a local run's environment puts the head's tree there).
        paths.append(src)
    env = dict(os.environ)
    # The driver's own modules first (a file of the pull request cannot stand in for them; their
    # directory holds nothing else), then the side's paths, then what the image sets.
    env["PYTHONPATH"] = os.pathsep.join([lib_dir, *paths, *filter(None, [env.get("PYTHONPATH")])])
    env[PATHS_VARIABLE] = os.pathsep.join(paths)
    # The same string hashes on both sides, so identical code lays out its dicts and sets alike.
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if spec.get("gpu") is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(spec["gpu"])
    return env


def other(side):
    return "head" if side == "base" else "base"


class Driver:
    def __init__(self, spec, scratch, cpus=None):
        # Before any process of the run starts: see paritybot_perf_guard.
        own = [
            os.path.join(LIB_DIR, f) for f in sorted(os.listdir(LIB_DIR)) if f.startswith("paritybot_perf")
        ]
        self.guard = Guard(spec["sides"]["base"]["root"], spec["sides"]["head"]["root"], own)
        self.spec = spec
        self.scratch = scratch
        self.cpus = cpus
        self.envs = {side: _side_env(spec, side, os.path.dirname(SCRIPT)) for side in SIDES}
        self.users, self.same_user = side_users(self._reached())
        self.results = []
        self.errors = []
        self.discovered = {}
        self.warnings = []
        self.skipped = []  # benchmarks their own setup skipped (asv: NotImplementedError)
        self.family = 1  # the benchmarks of the run, whose comparisons are held together
        self.saved = 0.0  # measuring time decisive benchmarks left to undecided ones
        self.phases = dict.fromkeys(PHASES, 0.0)  # where the wall time went, for the reader

    def _reached(self):
        """What each side's processes must read or run: the checkouts, the driver, the interpreters
        and commands."""
        found = [LIB_DIR, self.scratch]
        for side in SIDES:
            found.append(self.spec["sides"][side]["root"])
            programs = [k["argv"][0] for k in self.spec["kinds"] if k["kind"] == "command" and k.get("argv")]
            if any(k["kind"] != "command" for k in self.spec["kinds"]):
                programs.append(self.spec["sides"][side].get("python", "python3"))
            for program in programs:
                where = shutil.which(program, path=self.envs[side].get("PATH"))
                if where is None and os.sep in program:
                    where = os.path.join(self.spec["sides"][side]["root"], program)
                found.append(where or program)
        return found

    def _preexec(self, side, pin=False, away=False):
        """What a process of ``side`` runs before its program: pinned (a command, which is timed
        from its start), or kept off the measuring CPUs while it starts (``away``, where others
        are left), then its own user, where there is one."""
        switch = become(self.users[side]) if self.users else None
        cpus = self.cpus if pin else None
        if away and self.cpus is not None and hasattr(os, "sched_getaffinity"):
            cpus = sorted(set(os.sched_getaffinity(0)) - set(self.cpus)) or None

        def preexec():
            if cpus is not None:
                os.sched_setaffinity(0, cpus)
            if switch is not None:
                switch()

        return preexec

    def _asv_dir(self, kind, side):
        root = self.spec["sides"][side]["root"]
        return asv_benchmark_dir(os.path.join(root, kind.get("config", "asv.conf.json")))

    def _asv_config_read(self, kind):
        """Whether both sides' asv configuration reads; an error per side that does not."""
        for side in SIDES:
            try:
                self._asv_dir(kind, side)
            except ConfigError as exc:
                self.errors.append({"kind": "asv", "side": side, "message": _clip(str(exc))})
        return not any(e["kind"] == "asv" for e in self.errors)

    def _worker_argv(self, kind, side):
        python = self.spec["sides"][side].get("python", "python3")
        if kind["kind"] == "pytest":
            return [python, SCRIPT, "pytest-worker", *PYTEST_OPTIONS, "-q", *kind.get("args", [])]
        return [python, SCRIPT, "asv-worker", self._asv_dir(kind, side)]

    # Measuring -------------------------------------------------------------------------------

    def run_kind(self, kind):
        """Start every process at once; each lists its side's benchmarks; the common ones are run."""
        if kind["kind"] == "asv" and not self._asv_config_read(kind):
            return
        slots = [
            (side, k) for k in range(first_pairs(self.spec["processes"], usable_cpus())) for side in SIDES
        ]
        workers = {slot: self._start(kind, slot) for slot in slots}
        self.growth = (kind, slots)
        # slot → process started for an undecided benchmark, not yet taking turns
        self.joining: dict = {}
        try:
            with self._phase("start"):
                found = self._collected(kind, workers)
            if found is None:
                return
            base, head = set(found["base"]), set(found["head"])
            self.discovered[kind["kind"]] = {
                "only_base": [n for n in found["base"] if n not in head],
                "only_head": [n for n in found["head"] if n not in base],
            }
            # A selection names pytest tests; the other kinds run whole.
            names = self.spec.get("names") if kind["kind"] == "pytest" else None
            remaining = [n for n in found["head"] if n in base and selected(n, names)]
            self.family = len(self.results) + len(remaining)
            for worker in workers.values():
                worker.send(cmd="plan", names=remaining)
            while remaining:
                for slot in slots:
                    if slot not in workers:
                        # A process that hung or died is replaced for the benchmarks after its own.
                        workers[slot] = self._start(kind, slot)
                        self._await(workers[slot], None, ("collected",), self.spec["timeout_s"])
                        workers[slot].send(cmd="plan", names=remaining)
                if not self.guard.check(time.monotonic()):
                    return
                name = remaining.pop(0)
                result = self._measure(kind, name, workers, remaining)
                if result.pop("skipped", None):
                    self.skipped.append(name)
                else:
                    self.results.append(result)
                with self._phase("finish"):
                    for slot in slots:
                        error = self._finish(workers[slot], name)
                        if error and not result["error"]:
                            result["error"] = {"side": slot[0], "message": error}
                        if workers[slot].lost:
                            workers.pop(slot).close()
                    self._move_on(name, remaining)
        finally:
            for worker in [*workers.values(), *self.joining.values()]:
                worker.stop()
                worker.close()

    def _collected(self, kind, workers):
        """Per side, the benchmarks every one of its processes found; None when a side found none."""
        found: dict = {}
        failed: dict = {}
        broken: dict = {side: {} for side in SIDES}
        for (side, _), worker in sorted(workers.items()):
            event = self._await(worker, None, ("collected",), self.spec["timeout_s"])
            if event["ev"] == "error":
                failed.setdefault(side, event.get("message", ""))
                continue
            if isinstance(event.get("broken"), dict):
                for where, error in list(event["broken"].items())[:10]:
                    broken[side].setdefault(_clip(str(where), 300), _clip(str(error), 500))
            names = [str(n)[:MAX_NAME] for n in event.get("names") or []][:MAX_BENCHMARKS]
            for where in (event.get("foreign") or [])[:5]:
                warning = f"{side} imported {_clip(where, 300)}, not from its checkout: both sides may run the same code"
                if warning not in self.warnings:
                    self.warnings.append(warning)
            found[side] = [n for n in found[side] if n in set(names)] if side in found else names
        for side in SIDES:
            if side in failed:
                message = "could not list the benchmarks: " + failed[side]
                self.errors.append({"kind": kind["kind"], "side": side, "message": _clip(message)})
        self._warn_not_collected(broken)
        return None if failed else found

    def _warn_not_collected(self, broken):
        """A warning per file that did not collect: its benchmarks are missing from the comparison."""
        for where in sorted(set(broken["base"]) | set(broken["head"])):
            sides = [side for side in SIDES if where in broken[side]]
            on = "either side" if len(sides) == 2 else sides[0]
            warning = f"{where} could not be collected on {on}, its benchmarks not compared: {broken[sides[-1]][where]}"
            if warning not in self.warnings:
                self.warnings.append(_clip(warning, 600))

    def _start(self, kind, slot, away=False):
        side, index = slot
        tag = f"{side}-{index}"
        argv = self._worker_argv(kind, side)
        if kind["kind"] == "pytest":
            # pytest's tmp_path directories go with the run's files, not the machine's temp dir, in
            # a directory the process's user owns.
            own = os.path.join(self.scratch, "pytest-" + tag)
            os.makedirs(own, exist_ok=True)
            if self.users:
                os.chown(own, self.users[side], self.users[side])
            argv.append("--basetemp=" + os.path.join(own, "tmp"))
        return Worker(
            side,
            tag,
            argv,
            self.spec["sides"][side],
            self.envs[side],
            self.scratch,
            self._preexec(side, away=away),
        )

    def _await(self, worker, name, expected, timeout):
        """The next event of ``worker`` about ``name`` among ``expected`` or ``error``.

        A process that hangs past ``timeout``, ends, or cannot go on is killed and marked lost; the
        event returned is then an ``error`` saying why, with the end of its output.
        """
        while not worker.lost:
            event = worker.receive(timeout)
            what = event.get("ev")
            if what in ("timeout", "exit", "fatal"):
                if what == "timeout":
                    reason = f"timed out after {timeout:.0f} s"
                elif what == "exit":
                    reason = "its process ended (exit code {})".format(event.get("code"))
                else:
                    reason = str(event.get("message", ""))
                worker.kill()
                worker.lost = True
                tail = worker.log_tail()
                return {"ev": "error", "message": _clip(reason + (": " + tail if tail else ""))}
            if event.get("name") == name and (what in expected or what == "error"):
                return event
        return {"ev": "error", "message": "its process was lost earlier"}

    @contextlib.contextmanager
    def _phase(self, phase):
        began = time.monotonic()
        try:
            yield
        finally:
            self.phases[phase] += time.monotonic() - began

    def _grow(self):
        """Start more process pairs, up to twice as many (at most ``processes``), in the
        background: they list the benchmarks while the others measure, on the CPUs the measuring
        does not use where there are any, and take turns once set up (:meth:`_join`)."""
        kind, slots = self.growth
        pairs = (len(slots) + len(self.joining)) // 2
        for k in range(pairs, min(2 * pairs, self.spec["processes"])):
            for side in SIDES:
                worker = self._start(kind, (side, k), away=True)
                worker.stage = None  # listing its benchmarks
                self.joining[(side, k)] = worker

    def _join(self, name, remaining, workers):
        """Take the joining processes' news without waiting; a pair whose two processes are set up
        for ``name`` takes turns from now on (pinned like the others). The pairs now taking turns."""
        slots = self.growth[1]
        for slot, worker in list(self.joining.items()):
            while slot in self.joining:
                event = worker.receive(0)
                what = event.get("ev")
                if what == "timeout":
                    break
                if what in ("exit", "fatal") or (what == "error" and worker.stage is None):
                    worker.kill()  # a process that could not start: the others measure without it
                    worker.close()
                    del self.joining[slot]
                elif what == "collected" and worker.stage is None:
                    worker.send(cmd="plan", names=[name, *remaining])
                    worker.stage = name
                elif what == "ready" and event.get("name") == worker.stage == name:
                    worker.stage = "ready"
        for k in sorted({k for _, k in self.joining}):
            pair = [self.joining.get((side, k)) for side in SIDES]
            ready = [w for w in pair if w is not None and w.stage == "ready"]
            if len(ready) == len(SIDES):
                for side, worker in zip(SIDES, ready):
                    del self.joining[(side, k)]
                    worker.stage = None
                    self._pin(worker)
                    workers[(side, k)] = worker
                    slots.append((side, k))
        return sorted({k for _, k in workers})

    def _move_on(self, name, remaining):
        """At the end of ``name``: joining processes set up for it go on to the next benchmark."""
        for worker in self.joining.values():
            if worker.stage in (name, "ready"):
                worker.send(cmd="stop", name=name)
                worker.stage = remaining[0] if remaining else "done"

    def _measure(self, kind, name, workers, remaining):
        """All rounds of one benchmark: the process pairs take turns, and so does the side first."""
        spec = self.spec
        timeout = spec["timeout_s"]
        result = {"kind": kind["kind"], "name": name, "unit": "s", "rounds": [], "warmup": 0, "error": None}
        estimates, fixed, cuda = [], None, False
        shares: dict = {}  # per side, the largest CPU share of a calibration try
        set_up = time.monotonic()
        # One process a side calibrates (its first pair's): on a busy machine each process asked is
        # a wait for the CPU, and the others' first turn is a warm-up round anyway.
        calibrating = min(k for _, k in workers)
        for step, expected in (("ready", ("ready", "skipped")), ("calibrate", ("calibrated",))):
            for (side, k), worker in sorted(workers.items()):
                if step == "calibrate":
                    self._pin(worker)
                    if k != calibrating:
                        continue
                    worker.send(cmd="calibrate", name=name)
                event = self._await(worker, name, expected, timeout)
                if event["ev"] == "error":
                    result["error"] = {"side": side, "message": _clip(event.get("message", ""))}
                    return result
                if event["ev"] == "skipped":
                    result["skipped"] = side
                    return result
                if step == "calibrate":
                    estimates.append(float(event.get("estimate") or 0.0))
                    fixed = event.get("fixed") or fixed
                    shares[side] = max(shares.get(side, 0.0), float(event.get("cpu_share") or 0.0))
                    cuda = cuda or bool(event.get("cuda"))
        self.phases["set_up"] += time.monotonic() - set_up
        # The least disturbed calibration is the closest to the code's own cost.
        estimate = min(estimates) or 1e-9
        n = int(fixed) if fixed else max(1, int(spec["round_time_s"] / estimate))
        result["iterations"] = n
        result["preempted"] = 0
        result["clock"] = clock = choose_clock(shares, self.cpus, cuda)
        active = sorted({k for _, k in workers})
        # One turn is several rounds of one process, back to back: fewer wake-ups, which on a busy
        # machine each wait for the CPU; round i of base's turn is paired with round i of head's.
        per_turn = max(1, int(TURN_S / (n * estimate)))
        # Looks at a doubling schedule of measured time; the last at the budget, plus what earlier,
        # decisive benchmarks left (up to as much again), so time goes where the answer is open.
        extra = min(self.saved, spec["max_time_s"])
        self.saved -= extra
        looks = look_budgets(spec["max_time_s"])
        looks[-1] += extra
        started, spent, turn, looked = time.monotonic(), 0.0, 0, 0
        cycle, cycle_began = 0, 0  # a cycle: a turn of every pair, whose rounds share its time
        turns_of: dict = {}  # per pair, its turns so far: its first are warm-up
        measuring = started
        rounds = result["rounds"]
        result["looks"] = len(looks)
        while len(rounds) < spec["max_rounds"]:
            # On a machine so busy that each round waits for the CPU: enough once twice the budget
            # has passed.
            late = time.monotonic() - started >= 2 * looks[-1]
            if late and len(rounds) >= spec["min_rounds"]:
                break
            if self.joining:
                active = self._join(name, remaining, workers)
            if self._covered(rounds, active) and spent >= looks[looked]:
                looked += 1
                if looked == len(looks) or self._decisive(rounds, len(looks)):
                    break
                if looked == 2 and not self.joining and len(active) < spec["processes"]:
                    # Undecided at a quarter of its budget: more processes, for it and the ones
                    # after it, starting while these measure.
                    with self._phase("grow"):
                        self._grow()
            if turn - cycle_began >= len(active):
                cycle, cycle_began = cycle + 1, turn
            pair = active[turn % len(active)]
            first = SIDES[(turn // len(active)) % 2]
            turns_of[pair] = turns_of.get(pair, 0) + 1
            warming = turns_of[pair] <= spec["warmup"]  # each pair of processes warms up
            count = 1 if warming else min(per_turn, spec["max_rounds"] - len(rounds))
            got = {}
            for side in (first, other(first)):
                worker = workers[(side, pair)]
                worker.send(cmd="run", name=name, n=n, rounds=count, clock=clock)
                event = self._await(worker, name, ("rounds",), timeout + 40 * count * n * estimate)
                if event["ev"] == "error":
                    result["error"] = {"side": side, "message": _clip(event.get("message", ""))}
                    return result
                calls = max(1, int(event.get("n") or n))  # per side: asv's ``number`` may differ
                got[side] = [(t / calls, cut) for t, cut in zip(event["times"], event["preempted"])][:count]
            turn += 1
            for (base, base_cut), (head, head_cut) in zip(got["base"], got["head"]):
                spent += (base + head) * n
                if warming:
                    result["warmup"] += 1
                elif (
                    (base_cut or head_cut)
                    and clock == "wall"  # the CPU clock and CUDA events do not count the wait
                    and not late
                    and result["preempted"] < len(rounds) + 10
                ):
                    # The scheduler took the CPU from a side during this round: it measured the
                    # neighbours, not the code, and is dropped, as long as no more rounds were
                    # dropped than kept (and twice the benchmark's time has not passed): on a machine
                    # so busy that every round is cut, the rounds are kept and the interval widens.
                    result["preempted"] += 1
                else:
                    rounds.append(
                        {"base": base, "head": head, "first": first, "process": pair, "cycle": cycle}
                    )
        self.saved += max(0.0, spec["max_time_s"] + extra - spent)
        self.phases["measure"] += time.monotonic() - measuring
        return result

    def _covered(self, rounds, active):
        """Enough rounds to look: the minimum, and some from every process pair taking turns."""
        return len(rounds) >= self.spec["min_rounds"] and {r["process"] for r in rounds} >= set(active)

    def _decisive(self, rounds, looks):
        """Whether the interval is decisive at this look, each look held to 1/looks of the error
        and the run's error shared by its benchmarks (the strictest share: the verdict's is no
        stricter, so what is decisive here stays so)."""
        alpha = self.spec["error"] / max(1, self.family) / looks
        found = estimate([(r["process"], r["base"], r["head"], r.get("cycle")) for r in rounds])
        return decisive(found, alpha, self.spec["threshold"])

    def _pin(self, worker):
        """Pin every thread of a benchmark process once it is set up (it started on every CPU)."""
        if worker.pinned or self.cpus is None:
            return
        worker.pinned = True
        try:
            threads = [int(t) for t in os.listdir(f"/proc/{worker.proc.pid}/task")]
        except OSError:
            threads = [worker.proc.pid]
        for thread in threads:
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(thread, self.cpus)

    def _finish(self, worker, name):
        """End this benchmark on ``worker``; the error it reported on the way out, if any.

        A test that fails after its timed rounds (an assertion on the result) still breaks the
        benchmark: its error comes here.
        """
        if worker.lost:
            return None
        worker.send(cmd="stop", name=name)
        error = None
        while True:
            event = self._await(worker, name, ("done",), self.spec["timeout_s"])
            if event["ev"] == "done" or worker.lost:
                return error
            if event["ev"] == "error" and error is None:
                error = _clip(event.get("message", ""))

    # Commands --------------------------------------------------------------------------------

    def run_command(self, kind):
        """Run the command once per side and round, the side first alternating; pair the medians."""
        runs = []  # per round: (first, {side: {name: seconds or error text}})
        first = "base"
        for _ in range(self.spec["warmup"] + kind.get("rounds", 10)):
            values = {}
            for side in (first, other(first)):
                values[side], error = self._command_round(kind, side)
                if error:
                    self.errors.append({"kind": "command", "side": side, "message": _clip(error)})
                    return
            runs.append((first, values))
            first = other(first)
        names = {side: list(dict.fromkeys(n for _, v in runs for n in v[side])) for side in SIDES}
        self.discovered["command"] = {
            "only_base": [n for n in names["base"] if n not in names["head"]],
            "only_head": [n for n in names["head"] if n not in names["base"]],
        }
        for name in [n for n in names["head"] if n in names["base"]][:MAX_BENCHMARKS]:
            result = {"kind": "command", "name": name, "unit": "s", "rounds": [], "error": None}
            result["warmup"] = self.spec["warmup"]
            for first, values in runs[self.spec["warmup"] :]:
                pair = {side: values[side].get(name) for side in SIDES}
                broken = [s for s in SIDES if not isinstance(pair[s], float)]
                if broken:
                    message = pair[broken[0]] or "missing from one run's output"
                    result["error"] = {"side": broken[0], "message": _clip(message)}
                    result["rounds"] = []
                    break
                # Each run of the command is a process of its own: its pair of runs is one summary.
                result["rounds"].append(dict(pair, first=first, process=len(result["rounds"])))
            self.results.append(result)

    def _command_round(self, kind, side):
        """One run of the command: name → median seconds per call (or an error string)."""
        out_path = os.path.join(self.scratch, side + "-command.out")
        with open(out_path, "wb") as out:
            try:
                proc = subprocess.run(
                    kind["argv"],
                    cwd=self.spec["sides"][side]["root"],
                    env=self.envs[side],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.DEVNULL,
                    timeout=self.spec["timeout_s"],
                    preexec_fn=self._preexec(side, pin=True),
                )
            except subprocess.TimeoutExpired:
                return {}, "the command timed out after {:.0f} s on {}".format(self.spec["timeout_s"], side)
        with open(out_path, "rb") as fh:
            text = fh.read(COMMAND_OUTPUT_MAX).decode("utf-8", "replace")
        if proc.returncode != 0:
            return {}, f"the command exited with code {proc.returncode} on {side}"
        return parse_command_output(text, side)

    # The run ---------------------------------------------------------------------------------

    def _warn_harness(self):
        """Name the files the change edits that run during the measurement besides the measured code."""
        dirs = [a for k in self.spec["kinds"] if k["kind"] == "pytest" for a in k.get("args", [])]
        for kind in (k for k in self.spec["kinds"] if k["kind"] == "asv"):
            with contextlib.suppress(ConfigError):
                root = self.spec["sides"]["head"]["root"]
                dirs.append(os.path.relpath(self._asv_dir(kind, "head"), root))
        changed = harness_changes(
            self.spec["sides"]["base"]["root"], self.spec["sides"]["head"]["root"], dirs
        )
        if changed:
            names = ", ".join(changed[:15]) + (f" and {len(changed) - 15} more" if len(changed) > 15 else "")
            self.warnings.append(
                _clip(
                    "this change edits files that run during the measurement besides the measured code "
                    f"(they can bias it; review them): {names}",
                    1500,
                )
            )

    def run(self):
        self._warn_harness()
        for kind in self.spec["kinds"]:
            if kind["kind"] == "command":
                self.run_command(kind)
            else:
                self.run_kind(kind)
            if not self.guard.check(time.monotonic(), force=True):
                return
        if self.skipped:
            names = ", ".join(self.skipped[:10]) + (
                f" and {len(self.skipped) - 10} more" if len(self.skipped) > 10 else ""
            )
            self.warnings.append(
                _clip(f"skipped by their own setup (NotImplementedError), not compared: {names}", 600)
            )


DEFAULTS = {
    "processes": 8,
    "warmup": 1,
    "min_rounds": 10,
    "max_rounds": 600,
    "round_time_s": 0.002,
    "max_time_s": 1.2,
    "threshold": 0.03,
    "error": 0.01,
    "timeout_s": 300.0,
    "cpus": None,
    "gpu": None,
    "names": None,
}


def choose_cpus(cpus):
    """The CPUs to pin the benchmark processes to, or None and why not.

    Without a choice, one CPU, the last the run may use: both sides then run on the same core,
    wherever the scheduler would have put each. Measured on two CPUs, eight runs of a no-op change
    with one process per side: unpinned, the mean ratio head/base was 0.987 for a 3 µs benchmark
    and 1.013 for a 0.5 ms one, a steady difference between the sides; pinned to one CPU, 1.000 and
    0.997. Processes start and set up on every CPU; they are pinned before their first timed call.
    """
    if not hasattr(os, "sched_setaffinity"):
        return None, "this system cannot pin processes to CPUs"
    allowed = sorted(os.sched_getaffinity(0))
    chosen = [c for c in (cpus if cpus is not None else allowed[-1:]) if c in allowed]
    if not chosen:
        return None, f"none of the CPUs asked for ({cpus}) is available to the run ({allowed})"
    return chosen, None


def main(spec_path, out_path):
    with open(spec_path, encoding="utf-8") as fh:
        spec = dict(DEFAULTS, **json.load(fh))
    scratch = os.path.join(os.path.dirname(os.path.abspath(out_path)), "perf-work")
    os.makedirs(scratch, exist_ok=True)
    for side in SIDES:
        spec["sides"][side]["root"] = os.path.abspath(spec["sides"][side]["root"])
    cpus, pin_error = choose_cpus(spec["cpus"])
    driver = Driver(spec, scratch, cpus)
    started = time.monotonic()
    driver.run()
    report = {
        "version": VERSION,
        "cpus": cpus,
        "pin_error": pin_error,
        "gpu": spec["gpu"],
        "wall_s": round(time.monotonic() - started, 3),
        "benchmarks": driver.results,
        "errors": driver.errors,
        "discovered": driver.discovered,
        "warnings": driver.warnings[:20],
        "tampered": driver.guard.broken,
        "users": driver.users or {},
        "same_user": driver.same_user,
        "phases": {k: round(v, 3) for k, v in driver.phases.items()},
    }
    if driver.guard.broken:
        report["benchmarks"] = []  # measured against a reference that was changed: worth nothing
    # Whatever stands at OUT now (a file or a link a process of the run left) is replaced, never
    # written through.
    with contextlib.suppress(FileNotFoundError):
        os.unlink(out_path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with os.fdopen(os.open(out_path, flags, 0o644), "w", encoding="utf-8") as fh:
        json.dump(report, fh)
    return 0


def pytest_worker(args):
    """pytest, started as a script so that sys.path begins with this directory, not the checkout's
    (``python -m`` would put the working directory first, where a file of the pull request could
    stand in for the plugin)."""
    import pytest

    return pytest.main(list(args))


if __name__ == "__main__":
    if sys.argv[1:2] == ["pytest-worker"]:
        sys.exit(pytest_worker(sys.argv[2:]))
    if sys.argv[1:2] == ["asv-worker"]:
        sys.exit(asv_worker(sys.argv[2]))
    sys.exit(main(sys.argv[1], sys.argv[2]))
