"""One side's benchmark process as the driver sees it: started with its pipes, asked, heard.

Standard library only, valid on Python 3.8. Injected as ``paritybot_perf_process.py`` beside the
driver.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import time

from paritybot_perf_worker import FDS_VARIABLE

MAX_LINE = 1 << 16  # what one benchmark process may send in one line: the driver stays small


class Worker:
    """One side's benchmark process and the pipes to it."""

    def __init__(self, side, tag, argv, spec_side, env, scratch, preexec=None):
        self.side = side
        self.log_path = os.path.join(scratch, tag + ".log")
        to_worker, self._cmd = os.pipe()
        self._events, from_worker = os.pipe()
        env = dict(env, **{FDS_VARIABLE: f"{to_worker},{from_worker}"})
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                cwd=spec_side["root"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(to_worker, from_worker),
                preexec_fn=preexec,
            )
        os.close(to_worker)
        os.close(from_worker)
        self._buffer = b""
        self.lost = False
        self.pinned = False
        self.stage = None  # a process joining the turns: what it is getting ready for

    def send(self, **message):
        # A process that is gone says so with its next event.
        with contextlib.suppress(OSError):
            os.write(self._cmd, (json.dumps(message) + "\n").encode("utf-8"))

    def receive(self, timeout):
        """The next event, ``{"ev": "timeout"}`` or ``{"ev": "exit"}``; what is not JSON is skipped."""
        deadline = time.monotonic() + timeout
        while True:
            if b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                try:
                    event = json.loads(line.decode("utf-8"))
                except ValueError:
                    continue
                if isinstance(event, dict):
                    return event
                continue
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._events], [], [], max(0.0, left))
            if not ready:
                if left <= 0:
                    return {"ev": "timeout"}
                continue
            chunk = os.read(self._events, 65536)
            if not chunk:
                self.proc.wait()
                return {"ev": "exit", "code": self.proc.returncode}
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE and b"\n" not in self._buffer:
                self._buffer = b""  # an endless line is nobody's message

    def stop(self, timeout=10.0):
        self.send(cmd="stop")
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self):
        # The benchmark processes stay in the driver's process group, so a runner that stops the
        # step (timeout, cancel) stops them too; here only the one process is stopped.
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()

    def close(self):
        for fd in (self._cmd, self._events):
            with contextlib.suppress(OSError):
                os.close(fd)

    def log_tail(self, chars=1500):
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - chars))
                return fh.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
