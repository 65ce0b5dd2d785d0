"""A commit's tree is extracted the same way on every Python paritybot claims: with tarfile's
``data`` filter where the interpreter has it (3.11.4 and later), by hand where it does not
(Debian 12's 3.11.2). Each case runs both ways, the second with the filter taken away."""

from __future__ import annotations

import io
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.git import export_commit
from runner.safe_tar import extract_all
from tests.gitrepo import GitRepo


@pytest.fixture(params=["with filter", "by hand"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "by hand":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    yield request.param


def _archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> tarfile.TarFile:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return tarfile.open(fileobj=buf)


def _file(name: str, data: bytes = b"x", mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.mode = mode
    return info, data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def test_a_commit_with_files_scripts_and_links_inside_comes_out_whole(mode: str, tmp_path: Path) -> None:
    repo = GitRepo(tmp_path / "repo")
    repo.commit({"pkg/__init__.py": "VALUE = 1\n", "run.sh": "#!/bin/sh\necho hi\n"})
    (repo.path / "run.sh").chmod(0o755)
    (repo.path / "docs").mkdir()
    (repo.path / "docs" / "pkg").symlink_to("../pkg")
    repo.git("add", "-A")
    sha = repo.commit({}, "scripts and links")

    export_commit(repo.path, sha, tmp_path / "out")

    out = tmp_path / "out"
    assert (out / "pkg" / "__init__.py").read_text() == "VALUE = 1\n"
    assert (out / "run.sh").stat().st_mode & stat.S_IXUSR
    assert (out / "docs" / "pkg").is_symlink()
    assert (out / "docs" / "pkg" / "__init__.py").read_text() == "VALUE = 1\n"


@pytest.mark.parametrize(
    "members",
    [
        pytest.param([_file("../evil")], id="dot-dot path"),
        pytest.param([_link("up", "../..")], id="symlink out"),
        pytest.param([_link("abs", "/etc")], id="symlink absolute"),
        pytest.param([_link("d", "."), _link("d/e", "..")], id="symlink out through a link"),
        pytest.param([_link("hard", "../outside", tarfile.LNKTYPE)], id="hard link out"),
    ],
)
def test_nothing_is_written_or_pointed_outside_the_target(
    mode: str, tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]
) -> None:
    target = tmp_path / "a" / "target"
    target.mkdir(parents=True)
    with _archive(*members) as tar, pytest.raises(tarfile.TarError):
        extract_all(tar, target)
    outside = {p for p in tmp_path.rglob("*") if p != target and target not in p.parents}
    assert outside == {tmp_path / "a"}


def test_an_absolute_path_is_written_under_the_target(mode: str, tmp_path: Path) -> None:
    with _archive(_file("/etc/evil", b"data")) as tar:
        extract_all(tar, tmp_path / "t")
    assert (tmp_path / "t" / "etc" / "evil").read_bytes() == b"data"


def test_a_device_file_is_refused(mode: str, tmp_path: Path) -> None:
    info = tarfile.TarInfo("null")
    info.type = tarfile.CHRTYPE
    with _archive((info, None)) as tar, pytest.raises(tarfile.TarError):
        extract_all(tar, tmp_path)
    assert not (tmp_path / "null").exists()


def test_set_uid_and_world_write_bits_are_dropped(mode: str, tmp_path: Path) -> None:
    with _archive(_file("tool", b"#!/bin/sh\n", mode=0o4777)) as tar:
        extract_all(tar, tmp_path)
    assert stat.S_IMODE((tmp_path / "tool").stat().st_mode) == 0o755
