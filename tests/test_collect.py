"""Reading back a run's files: caps, links, FIFOs and directories, on the host and from the engine's archives."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.backends.base import Step
from runner.backends.collect import (
    LINK,
    NOT_A_FILE,
    OUTSIDE,
    CollectRefused,
    check_archive_stat,
    read_archive_file,
    read_host_file,
    too_large,
)
from runner.backends.host import HostRunner

MB = 1_000_000


def test_a_refusal_reads_as_a_sentence_about_the_file() -> None:
    assert too_large(312 * MB, 64 * MB).reason == "is 312 MB, more than the 64 MB paritybot reads"
    assert too_large(1500, 1000).reason == "is 1.5 kB, more than the 1.0 kB paritybot reads"
    # Rounding must not make a file look as large as the cap it exceeds.
    assert too_large(64 * MB + 1, 64 * MB).reason == (
        "is 64,000,001 bytes, more than the 64,000,000 bytes paritybot reads"
    )


# --- on the host -----------------------------------------------------------------------------------


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "out").mkdir(parents=True)
    return ws


def test_a_regular_file_within_the_cap_is_read(root: Path) -> None:
    (root / "out" / "report.xml").write_text("<ok/>")
    assert read_host_file(root, "out/report.xml", 100) == "<ok/>"
    assert read_host_file(root, "out/missing.xml", 100) is None
    assert read_host_file(root, "no-dir/report.xml", 100) is None


def test_a_file_over_the_cap_is_refused_before_it_is_read(root: Path) -> None:
    (root / "out" / "report.xml").write_bytes(b"x" * 2000)
    with pytest.raises(CollectRefused) as err:
        read_host_file(root, "out/report.xml", 1000)
    assert err.value.reason == "is 2.0 kB, more than the 1.0 kB paritybot reads"


def test_a_link_to_a_host_file_is_refused_not_followed(root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host-only")
    (root / "out" / "report.xml").symlink_to(secret)
    with pytest.raises(CollectRefused) as err:
        read_host_file(root, "out/report.xml", 1000)
    assert err.value.reason == LINK


def test_a_linked_directory_on_the_path_is_refused(root: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "report.xml").write_text("host-only")
    (root / "linked").symlink_to(elsewhere)
    with pytest.raises(CollectRefused) as err:
        read_host_file(root, "linked/report.xml", 1000)
    assert err.value.reason == LINK


def test_a_fifo_or_a_directory_is_refused_without_blocking(root: Path) -> None:
    os.mkfifo(root / "out" / "fifo")  # opening it for reading would block until a writer came
    (root / "out" / "dir").mkdir()
    for name in ("fifo", "dir"):
        with pytest.raises(CollectRefused) as err:
            read_host_file(root, f"out/{name}", 1000)
        assert err.value.reason == NOT_A_FILE


@pytest.mark.parametrize("rel", ["/etc/hostname", "../outside", "out/../../outside"])
def test_a_path_out_of_the_workspace_is_refused(root: Path, rel: str) -> None:
    with pytest.raises(CollectRefused) as err:
        read_host_file(root, rel, 1000)
    assert err.value.reason == OUTSIDE


async def test_the_host_runner_reports_a_linked_report_and_reads_nothing_through_it(
    root: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host-only-content")
    (root / "out" / "junit.xml").symlink_to(secret)
    (root / "out" / "big.xml").write_bytes(b"x" * 5000)
    step = Step(name="noop", argv=["true"], collect=["out/junit.xml", "out/big.xml"], collect_max_bytes=1000)
    result = await HostRunner().run(step, root)
    assert result.collected == {}
    assert result.refused == {
        "out/junit.xml": LINK,
        "out/big.xml": "is 5.0 kB, more than the 1.0 kB paritybot reads",
    }
    assert result.refusal("out/junit.xml", "the JUnit report") == (
        "the JUnit report is a symbolic link; paritybot reads no links from a run"
    )


# --- from the engine's archive stream ----------------------------------------------------------------


def _tar(info: tarfile.TarInfo, data: bytes = b"", pax: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT, pax_headers=pax or {}) as tar:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


class Chunks:
    """The archive as the engine streams it, counting what the reader took."""

    def __init__(self, data: bytes, size: int = 64 * 1024):
        self._data, self._size, self.taken, self.closed = data, size, 0, False

    def __iter__(self) -> Iterator[bytes]:
        for at in range(0, len(self._data), self._size):
            chunk = self._data[at : at + self._size]
            self.taken += len(chunk)
            yield chunk

    def close(self) -> None:
        self.closed = True


def test_a_file_within_the_cap_is_read_from_the_archive() -> None:
    chunks = Chunks(_tar(tarfile.TarInfo("report.xml"), b"<ok/>"))
    assert read_archive_file(chunks, 100) == "<ok/>"
    assert chunks.closed


def test_an_oversized_file_is_refused_from_its_header_without_reading_it() -> None:
    chunks = Chunks(_tar(tarfile.TarInfo("report.xml"), b"x" * (10 * MB)))
    with pytest.raises(CollectRefused) as err:
        read_archive_file(chunks, MB)
    assert err.value.reason == "is 10 MB, more than the 1.0 MB paritybot reads"
    assert chunks.taken <= 64 * 1024  # the first chunk: the header is enough
    assert chunks.closed


def test_the_stream_is_cut_at_the_cap_even_before_the_file_starts() -> None:
    # Headers the step controls (a long PAX record, extended attributes) count against the cap too.
    chunks = Chunks(_tar(tarfile.TarInfo("report.xml"), b"<ok/>", pax={"comment": "y" * (4 * MB)}))
    with pytest.raises(CollectRefused):
        read_archive_file(chunks, 1000)
    assert chunks.taken < 2 * MB + 64 * 1024


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE])
def test_a_link_directory_or_fifo_in_the_archive_is_refused(kind: bytes) -> None:
    info = tarfile.TarInfo("report.xml")
    info.type = kind
    info.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
    with pytest.raises(CollectRefused) as err:
        read_archive_file(Chunks(_tar(info)), 1000)
    assert err.value.reason == (LINK if kind == tarfile.SYMTYPE else NOT_A_FILE)


@pytest.mark.parametrize(
    ("stat", "reason"),
    [
        ({"mode": 0o644 | 1 << 27, "size": 11, "linkTarget": "/etc/passwd"}, LINK),
        ({"mode": 0o755 | 1 << 31, "size": 4096}, NOT_A_FILE),
        ({"mode": 0o644 | 1 << 25, "size": 0}, NOT_A_FILE),
        ({"mode": 0o644, "size": 300 * MB}, "is 300 MB, more than the 64 MB paritybot reads"),
    ],
)
def test_the_engines_stat_of_the_path_refuses_before_any_byte_is_read(
    stat: dict[str, object], reason: str
) -> None:
    with pytest.raises(CollectRefused) as err:
        check_archive_stat(stat, 64 * MB)
    assert err.value.reason == reason
    check_archive_stat({"mode": 0o644, "size": 64 * MB}, 64 * MB)
