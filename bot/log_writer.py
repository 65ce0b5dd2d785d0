"""The delivery log's writer process: verify, append, fdatasync, answer. See :mod:`bot.delivery_log`.

    python -m bot.log_writer DIRECTORY SEGMENT_BYTES     (the webhook secret comes first on stdin)

It reads whatever frames have arrived, checks each signature, appends the signed ones to the
current segment with one ``writev``, makes them durable with one ``fdatasync`` and only then
answers, one byte per frame. Every start opens a new segment, so a record torn by a crash is
always the last of its segment (the reader then knows the segment's end).
"""

from __future__ import annotations

import os
import select
import struct
import sys
from pathlib import Path

from bot.delivery_log import (
    ACCEPTED,
    FAILED,
    NOT_JSON,
    PIPE_BYTES,
    REJECTED,
    Frame,
    decode_frames,
    encode_parts,
    segments,
    signed,
)
from bot.intake import IntakeError, check_json_object


class SegmentWriter:
    def __init__(self, directory: Path, segment_bytes: int):
        self.directory = directory
        self.segment_bytes = segment_bytes
        existing = segments(directory)
        self.number = existing[-1][0] + 1 if existing else 1
        self.fd = self._open()
        self.written = 0

    def _open(self) -> int:
        path = self.directory / f"segment-{self.number:08d}.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        dir_fd = os.open(self.directory, os.O_RDONLY)  # the new file's directory entry must be durable too
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return fd

    def append(self, parts: list[bytes | memoryview]) -> None:
        if self.written >= self.segment_bytes:
            os.close(self.fd)
            self.number += 1
            self.fd, self.written = self._open(), 0
        view = [memoryview(p) for p in parts if p]
        while view:  # writev takes at most IOV_MAX buffers and may write less than asked
            n = os.writev(self.fd, view[:1024])
            self.written += n
            while view and n >= len(view[0]):
                n -= len(view[0])
                view.pop(0)
            if n:
                view[0] = view[0][n:]
        os.fdatasync(self.fd)


def _read_exactly(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError("stdin closed before the secret was read")
        data += chunk
    return data


class Inbox:
    """Bytes read from the pipe and not yet used; grows only as much as a burst needs."""

    def __init__(self, fd: int):
        self.fd = fd
        self.buf = bytearray(PIPE_BYTES)
        self.start = self.end = 0

    def fill(self) -> bool:
        """Block for some input, then take whatever else is already there; False at end of input."""
        if not self._read():
            return False
        while select.select([self.fd], [], [], 0)[0] and self._read():
            pass
        return True

    def _read(self) -> bool:
        if self.start == self.end:
            self.start = self.end = 0
        if len(self.buf) - self.end < PIPE_BYTES:
            if self.start:  # move what is left to the front before growing
                self.buf[: self.end - self.start] = self.buf[self.start : self.end]
                self.end -= self.start
                self.start = 0
            if len(self.buf) - self.end < PIPE_BYTES:
                self.buf.extend(bytes(PIPE_BYTES))
        n = os.readv(self.fd, [memoryview(self.buf)[self.end :]])
        self.end += n
        return n > 0

    def frames(self) -> list[Frame]:
        frames, used = decode_frames(memoryview(self.buf)[self.start : self.end])
        self.start += used
        return frames


def serve(stdin: int, stdout: int, writer: SegmentWriter) -> None:
    (length,) = struct.unpack(">H", _read_exactly(stdin, 2))
    secret = _read_exactly(stdin, length)
    inbox = Inbox(stdin)
    while inbox.fill():
        frames = inbox.frames()
        if not frames:
            continue
        verdicts = [_verdict(secret, f) for f in frames]
        parts = [
            part
            for f, verdict in zip(frames, verdicts, strict=True)
            if verdict == ACCEPTED
            for part in encode_parts(f.delivery_id, f.event, f.body)
        ]

        answer = FAILED
        try:
            if parts:
                writer.append(parts)
            answer = ACCEPTED
        except OSError as exc:
            print(f"delivery log write failed: {exc}", file=sys.stderr)
        del parts, frames  # release the views into the inbox before it is reused
        os.write(stdout, b"".join(answer if verdict == ACCEPTED else verdict for verdict in verdicts))


def _verdict(secret: bytes, frame: Frame) -> bytes:
    """Signature first: an unsigned request learns nothing about what else is wrong with it."""
    if frame.signature is not None and not signed(secret, frame.body, frame.signature):
        return REJECTED
    try:
        check_json_object(frame.body)
    except IntakeError:
        return NOT_JSON
    return ACCEPTED


def main(argv: list[str]) -> int:
    directory, segment_bytes = Path(argv[0]), int(argv[1])
    directory.mkdir(parents=True, exist_ok=True)
    serve(sys.stdin.fileno(), sys.stdout.fileno(), SegmentWriter(directory, segment_bytes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
