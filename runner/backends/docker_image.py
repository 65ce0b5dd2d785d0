"""What the container runner reads from an image's name and files: the step user's numeric ids, the
digest that names the image in repro commands, and the hook store's volume name. Pure functions."""

from __future__ import annotations

from runner.backends.base import RunnerError


def parse_user(spec: str, passwd: str | None = None, group: str | None = None) -> tuple[int, int]:
    """Numeric (uid, gid) for a Docker ``user`` value, resolved the way the engine resolves it.

    ``uid[:gid]`` needs no files; a name needs the image's ``/etc/passwd`` (and ``/etc/group`` for a
    group name). A uid without a gid takes the passwd entry's group, else 0, as Docker does.
    """
    user, _, grp = spec.partition(":")
    users = _colon_table(passwd)  # name → [name, password, uid, gid, ...]
    if user.isdigit():
        uid = int(user)
        entry = next((row for row in users.values() if row[2] == user), None)
    elif user in users and users[user][2].isdigit():
        entry = users[user]
        uid = int(entry[2])
    else:
        raise RunnerError(f"user {user!r} is not in the image's /etc/passwd; use a numeric uid:gid")
    default_gid = int(entry[3]) if entry and len(entry) > 3 and entry[3].isdigit() else 0
    if not grp:
        return uid, default_gid
    if grp.isdigit():
        return uid, int(grp)
    groups = _colon_table(group)  # name → [name, password, gid, members]
    if grp in groups and groups[grp][2].isdigit():
        return uid, int(groups[grp][2])
    raise RunnerError(f"group {grp!r} is not in the image's /etc/group; use a numeric uid:gid")


def _colon_table(text: str | None) -> dict[str, list[str]]:
    """name → all fields of its line, for passwd and group files."""
    table: dict[str, list[str]] = {}
    for line in (text or "").splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and not line.startswith("#"):
            table.setdefault(fields[0], fields)
    return table


def needs_image_accounts(spec: str) -> bool:
    """Whether resolving ``spec`` needs the image's passwd/group files."""
    user, sep, grp = spec.partition(":")
    return not (user.isdigit() and sep and grp.isdigit())


def pick_repo_digest(image_name: str, repo_digests: list[str]) -> str | None:
    """The ``repo@sha256:…`` naming the configured repository, else the first one, else None."""
    repo = _repository(image_name)
    for ref in repo_digests:
        if ref.split("@", 1)[0] == repo:
            return ref
    return repo_digests[0] if repo_digests else None


def pullable_name(image_name: str) -> str | None:
    """The configured ``name:tag`` when the image has no registry digest (built on this machine):
    what a reader can pull or build, unlike a local image id. None for an id or a digest."""
    if not image_name or image_name.startswith("sha256:") or "@" in image_name:
        return None
    return image_name


def _repository(image_name: str) -> str:
    name = image_name.split("@", 1)[0]
    # A tag follows the last colon only if that colon comes after the last slash (registry:port/…).
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    return name


def store_volume_name(key: str, image_digest: str, uid: int) -> str:
    """One volume per (store key, image, user): environments built elsewhere are never mixed in."""
    digest = image_digest.split(":", 1)[-1][:16]
    return f"paritybot-store-{key}-{digest}-u{uid}"
