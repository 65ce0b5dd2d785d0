"""runner.gitdiff against real repositories made with git in a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from gitrepo import GitRepo

from runner.git import GitError
from runner.gitdiff import (
    FileStatus,
    UnsafeFileError,
    changed_files,
    changed_lines,
    list_files,
    merge_base,
    parse_unified_diff,
    read_file,
    read_files,
)

TEN = "".join(f"line {i}\n" for i in range(1, 11))


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    return GitRepo(tmp_path / "repo")


def test_changed_files_reports_status_counts_renames_and_binaries(repo: GitRepo) -> None:
    moved_text = "".join(f"stable content {i}\n" for i in range(20))
    base = repo.commit({"a.py": TEN, "old_name.py": moved_text, "gone.txt": "x\n", "img.bin": b"\x00\x01"})
    repo.move("old_name.py", "pkg/new_name.py")
    head = repo.commit(
        {
            "a.py": TEN.replace("line 3\n", "line three\n") + "line 11\n",
            "gone.txt": None,
            "new file.py": "print('hi')\n",
            "img.bin": b"\x00\x02\x03",
        }
    )
    files = {f.path: f for f in changed_files(repo.path, base, head)}

    assert set(files) == {"a.py", "pkg/new_name.py", "gone.txt", "new file.py", "img.bin"}
    assert (files["a.py"].status, files["a.py"].additions, files["a.py"].deletions) == (
        FileStatus.MODIFIED,
        2,
        1,
    )
    assert files["pkg/new_name.py"].status == FileStatus.RENAMED
    assert files["pkg/new_name.py"].old_path == "old_name.py"
    assert files["gone.txt"].status == FileStatus.DELETED
    assert files["new file.py"].status == FileStatus.ADDED
    assert files["new file.py"].additions == 1
    assert files["img.bin"].binary
    assert not files["a.py"].binary


def test_changed_lines_are_head_side_added_or_modified_lines(repo: GitRepo) -> None:
    base = repo.commit({"a.py": TEN, "sp ace.py": "x\n", "ü.py": "1\n"})
    text = TEN.replace("line 2\n", "line two\n").replace("line 7\n", "new 7a\nnew 7b\n")
    head = repo.commit({"a.py": text, "sp ace.py": "x\ny\n", "ü.py": "2\n"})

    lines = changed_lines(repo.path, base, head)

    assert lines["a.py"] == {2, 7, 8}
    assert lines["sp ace.py"] == {2}
    assert lines["ü.py"] == {1}


def test_pure_deletions_mark_neighbours_only_when_asked(repo: GitRepo) -> None:
    base = repo.commit({"a.py": TEN})
    head = repo.commit({"a.py": TEN.replace("line 5\n", "")})

    assert changed_lines(repo.path, base, head).get("a.py", set()) == set()
    assert changed_lines(repo.path, base, head, include_deletions=True)["a.py"] == {4, 5}


def test_deleted_files_have_no_changed_lines(repo: GitRepo) -> None:
    base = repo.commit({"a.py": TEN, "b.py": "b\n"})
    head = repo.commit({"b.py": None})

    assert "b.py" not in changed_lines(repo.path, base, head)


def test_parse_unified_diff_unquotes_c_style_paths() -> None:
    patch = '+++ "b/tab\\there \\303\\274.py"\n@@ -0,0 +1,2 @@\n+a\n+b\n'

    assert parse_unified_diff(patch) == {"tab\there ü.py": {1, 2}}


def test_read_file_and_read_files(repo: GitRepo) -> None:
    first = repo.commit({"a.py": "v1\n", "dir/b.py": "b\n"})
    repo.commit({"a.py": "v2\n"})

    assert read_file(repo.path, first, "a.py") == "v1\n"
    assert read_file(repo.path, "HEAD", "a.py") == "v2\n"
    assert read_file(repo.path, "HEAD", "missing.py") is None
    with pytest.raises(UnsafeFileError, match="is a directory"):
        read_file(repo.path, "HEAD", "dir")
    assert read_files(repo.path, first, ["dir/b.py", "nope", "a.py"]) == {
        "dir/b.py": "b\n",
        "nope": None,
        "a.py": "v1\n",
    }
    assert sorted(list_files(repo.path, "HEAD")) == ["a.py", "dir/b.py"]


def test_files_are_read_from_git_objects_and_links_are_refused(repo: GitRepo, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("the host's secret\n")
    (repo.path / "config.yaml").symlink_to(secret)
    (repo.path / "linked-dir").symlink_to(tmp_path)
    repo.git("add", "config.yaml", "linked-dir")
    head = repo.commit({"a.py": "ok\n"})

    with pytest.raises(UnsafeFileError, match=r"config\.yaml at \w+: is a symbolic link") as info:
        read_file(repo.path, head, "config.yaml")
    assert "secret" not in str(info.value)
    # A path below a linked directory is not in the commit's tree at all.
    assert read_file(repo.path, head, "linked-dir/host-secret.txt") is None
    # Many files at once: what would be refused reads as absent, never as the link's target.
    assert read_files(repo.path, head, ["a.py", "config.yaml", "linked-dir/host-secret.txt"]) == {
        "a.py": "ok\n",
        "config.yaml": None,
        "linked-dir/host-secret.txt": None,
    }


def test_files_over_the_cap_are_refused(repo: GitRepo) -> None:
    head = repo.commit({"big.py": "x = 1\n" * 1000, "small.py": "y = 2\n"})

    with pytest.raises(UnsafeFileError, match="6,000 bytes, more than the 100 read"):
        read_file(repo.path, head, "big.py", max_bytes=100)
    assert read_files(repo.path, head, ["big.py", "small.py"], max_bytes=100) == {
        "big.py": None,
        "small.py": "y = 2\n",
    }


def test_merge_base_of_diverged_branches(repo: GitRepo) -> None:
    fork = repo.commit({"a.py": "1\n"})
    repo.git("checkout", "-q", "-b", "feature")
    feature = repo.commit({"b.py": "feature\n"})
    repo.git("checkout", "-q", "main")
    main = repo.commit({"c.py": "main moved on\n"})

    assert merge_base(repo.path, main, feature) == fork
    # Diffing from the merge base shows only the branch's own change.
    assert [f.path for f in changed_files(repo.path, merge_base(repo.path, "main", "feature"), feature)] == [
        "b.py"
    ]


def test_bad_revisions_raise_with_gits_own_message(repo: GitRepo) -> None:
    repo.commit({"a.py": "1\n"})

    with pytest.raises(GitError, match="no-such-rev") as info:
        changed_files(repo.path, "no-such-rev", "HEAD")
    assert info.value.stderr
    with pytest.raises(GitError):
        read_file(repo.path, "no-such-rev", "a.py")
    with pytest.raises(GitError):
        merge_base(repo.path, "HEAD", "deadbeef" * 5)


def test_not_a_repository_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GitError, match=r"(?i)not a git repository"):
        changed_lines(tmp_path, "HEAD~1", "HEAD")
