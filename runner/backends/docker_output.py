"""A step's output as the container runner keeps it: the head and the tail, in bounded memory,
decoded as UTF-8 across chunk boundaries, secrets hidden even where the cap cut one in two."""

from __future__ import annotations

from collections.abc import Iterable

from bot.core.secrets import SECRET_MIN_LEN, redact


def _edge_redact(head: str, tail: str, secrets: Iterable[str]) -> tuple[str, str]:
    """Hide a secret cut in two by the output cap: its start ends the head, its end starts the tail."""
    for secret in (s for s in secrets if len(s) >= SECRET_MIN_LEN):
        for n in range(len(secret) - 1, SECRET_MIN_LEN - 1, -1):
            if head.endswith(secret[:n]):
                head = head[: len(head) - n] + "***"
                break
        for n in range(len(secret) - 1, SECRET_MIN_LEN - 1, -1):
            if tail.startswith(secret[-n:]):
                tail = "***" + tail[n:]
                break
    return head, tail


class OutputBuffer:
    """Keeps the first and the last ``limit // 2`` characters of a stream, in bounded memory."""

    def __init__(self, limit: int):
        self._half = max(limit // 2, 1)
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""
        self._dropped = 0
        self._decoder = _Utf8Decoder()

    def feed(self, chunk: bytes) -> str:
        """Take a chunk; returns its decoded text (all of it, whatever the cap keeps)."""
        decoded = self._decoder.decode(chunk)
        text = decoded
        room = self._half - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += min(room, len(text))
            text = text[room:]
        if text:
            self._tail += text
            if len(self._tail) > self._half:
                self._dropped += len(self._tail) - self._half
                self._tail = self._tail[-self._half :]
        return decoded

    def text(self, secrets: Iterable[str] = ()) -> str:
        self.feed(b"")
        self._tail += self._decoder.decode(b"", final=True)
        head, tail = "".join(self._head), self._tail
        secrets = list(secrets)
        if not self._dropped:
            return redact(head + tail, secrets)
        head, tail = _edge_redact(redact(head, secrets), redact(tail, secrets), secrets)
        return f"{head}\n\n… {self._dropped} characters cut …\n\n{tail}"


class _Utf8Decoder:
    def __init__(self) -> None:
        import codecs

        self._dec = codecs.getincrementaldecoder("utf-8")("replace")

    def decode(self, data: bytes, final: bool = False) -> str:
        return self._dec.decode(data, final)
