"""Shell commands that reproduce one failing test on a fresh clone, exactly as the run did it.

Pure: the run's facts come in as a :class:`ReproContext`, lines of shell come out. Every value is
quoted with :func:`shlex.quote` (node ids carry brackets, env values carry spaces), except the
``"$PWD"`` of the volume mount, which must stay a shell expansion.
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_WORKDIR = "/workspace"


class ReproContext(BaseModel):
    """What a repro command needs to know about the run."""

    model_config = ConfigDict(extra="forbid")

    head_sha: str = Field(pattern=r"^[0-9a-fA-F]{7,64}$")
    repo: str | None = Field(None, description="owner/name; gives the clone URL when none is set")
    clone_url: str | None = None
    pr_number: int | None = Field(None, ge=1)
    image_ref: str | None = Field(
        None, description="repo@sha256:…, else the configured name:tag, else an image id; None = host run"
    )
    image_id: str | None = Field(
        None, description="the image's id, said beside a name:tag that has no registry digest"
    )
    gpus: str | None = Field(None, description="the docker --gpus value; None = no GPUs")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="only the variables a reader must set: those differing from the image's defaults",
    )
    pytest_args: list[str] = Field(default_factory=list, description="the project's pytest options")
    setup: list[str] = Field(default_factory=list, description="shell commands run before the tests")
    docker_options: list[str] = Field(
        default_factory=list, description="extra docker run options that change behaviour (--shm-size 8g)"
    )
    workdir: str = Field(DEFAULT_WORKDIR, description="where the clone is mounted in the container")

    @model_validator(mode="after")
    def _check(self) -> ReproContext:
        if self.clone_url is None and self.repo is None:
            raise ValueError("a repro command needs clone_url or repo")
        return self

    @property
    def url(self) -> str:
        return self.clone_url or f"https://github.com/{self.repo}.git"

    @property
    def directory(self) -> str:
        """A clone directory named after the repo and the commit, so it never clashes with a checkout."""
        name = (self.repo or self.url.rstrip("/")).rsplit("/", 1)[-1].removesuffix(".git")
        name = re.sub(r"[^A-Za-z0-9._-]", "-", name).strip(".-") or "repo"
        return f"{name}-{self.head_sha[:7]}"


def clone_command(ctx: ReproContext) -> str:
    """Clone, fetch the pull request's head (it may live only in the fork) and check out the commit."""
    q = shlex.quote
    parts = [f"git clone {q(ctx.url)} {q(ctx.directory)}", f"cd {q(ctx.directory)}"]
    if ctx.pr_number is not None:
        parts.append(f"git fetch origin {q(f'pull/{ctx.pr_number}/head')}")
    parts.append(f"git checkout {q(ctx.head_sha)}")
    return " && ".join(parts)


def pytest_command(ctx: ReproContext, nodeid: str) -> str:
    return shlex.join(["python", "-m", "pytest", *ctx.pytest_args, nodeid])


def host_command(ctx: ReproContext, nodeid: str) -> str:
    """Run on the reader's machine; ``env`` works in every shell, unlike ``K=V cmd`` in fish."""
    test = pytest_command(ctx, nodeid)
    if ctx.env:
        test = shlex.join(["env", *(f"{k}={v}" for k, v in sorted(ctx.env.items()))]) + " " + test
    return " && ".join([*ctx.setup, test])


def docker_command(ctx: ReproContext, nodeid: str) -> str:
    """Run in the same image (by digest), with the same GPUs, variables and options."""
    if ctx.image_ref is None:
        raise ValueError("the docker form needs an image_ref")
    q = shlex.quote
    parts = ["docker run --rm"]
    if ctx.gpus is not None:
        parts.append(f"--gpus {q(ctx.gpus)}")
    parts.extend(f"-e {q(f'{k}={v}')}" for k, v in sorted(ctx.env.items()))
    parts.extend(q(opt) for opt in ctx.docker_options)
    parts.append(f'-v "$PWD":{q(ctx.workdir)} -w {q(ctx.workdir)} {q(ctx.image_ref)}')
    test = pytest_command(ctx, nodeid)
    if ctx.setup:
        # Setup must run inside the container, before the test, in one shell.
        parts.append("sh -c " + q(" && ".join([*ctx.setup, test])))
    else:
        parts.append(test)
    return " ".join(parts)


def repro_commands(ctx: ReproContext, nodeid: str) -> list[str]:
    """The commands, in order, that reproduce ``nodeid`` from nothing but a shell."""
    run = docker_command(ctx, nodeid) if ctx.image_ref is not None else host_command(ctx, nodeid)
    untagged = ctx.image_ref is not None and "@" not in ctx.image_ref
    if untagged and ctx.image_id and ctx.image_id != ctx.image_ref:
        # A tag can move: say which image the run had, so a reader can tell if theirs differs. A
        # comment at the end of the last command, so the commands still join with `&&`.
        run += f"  # {ctx.image_ref} has no registry digest; the run used image {ctx.image_id}"
    return [clone_command(ctx), run]
