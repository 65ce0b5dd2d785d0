"""Who may remove what a runner left on a shared engine: the pure decision, and a process's liveness."""

from __future__ import annotations

import subprocess
import sys

from runner.backends.ownership import (
    OWNER_LABEL,
    Owner,
    leftover_is_removable,
    new_instance,
    parse_owner,
    process_alive,
    this_process,
)

ME = Owner("instance", "me")
LIVE = Owner("instance", "live")
DEAD = Owner("instance", "dead")
STRANGER = Owner("instance", "another-deployment")
KNOWN = {LIVE: True, DEAD: False, STRANGER: None}


def labels(owner: Owner | None) -> dict[str, str]:
    base = {"paritybot.managed": "1", "paritybot.run-id": "r1"}
    return base if owner is None else base | {OWNER_LABEL: owner.label}


def test_only_what_a_dead_owner_left_is_removed() -> None:
    assert leftover_is_removable(labels(DEAD), ME, KNOWN)
    assert not leftover_is_removable(labels(LIVE), ME, KNOWN)
    assert not leftover_is_removable(labels(ME), ME, KNOWN)  # its own runs, running now
    assert not leftover_is_removable(labels(STRANGER), ME, KNOWN)  # cannot be judged here
    assert not leftover_is_removable(labels(None), ME, KNOWN)  # a build that wrote no owner
    assert not leftover_is_removable({OWNER_LABEL: "someone:else"}, ME, KNOWN)


def test_what_a_live_owner_left_of_a_run_that_is_over_is_removed() -> None:
    """A live owner that lost track of a container (its removal failed) does not keep it forever:
    once the store says the run ended, whoever ran it, it goes."""
    assert leftover_is_removable(labels(LIVE), ME, KNOWN, runs_over={"r1"})
    assert not leftover_is_removable(labels(LIVE), ME, KNOWN, runs_over={"another-run"})
    assert not leftover_is_removable(labels(ME), ME, KNOWN, runs_over={"r1"})  # its own: it closes them
    assert not leftover_is_removable(labels(None), ME, KNOWN, runs_over={"r1"})


def test_an_owner_label_reads_back_as_the_owner_and_nothing_else_does() -> None:
    owner = new_instance()
    assert parse_owner(owner.label) == owner
    assert parse_owner(this_process().label) == this_process()
    for bad in (None, "", "instance:", "daemon:x", "instance"):
        assert parse_owner(bad) is None


def test_a_process_owner_lives_while_its_process_does() -> None:
    assert process_alive(this_process()) is True
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "from runner.backends.ownership import this_process; print(this_process().label)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    gone = parse_owner(child.stdout.strip())
    assert gone is not None and process_alive(gone) is False  # the same pid may come back: start time differs
    host, boot, namespace, pid, ticks = this_process().id.split("/")
    assert process_alive(Owner("process", f"other-host/{boot}/{namespace}/{pid}/{ticks}")) is None
    assert process_alive(Owner("process", f"{host}/earlier-boot/{namespace}/{pid}/{ticks}")) is False
    assert process_alive(Owner("process", f"{host}/{boot}/other-namespace/{pid}/{ticks}")) is None
    assert process_alive(Owner("instance", "x")) is None
