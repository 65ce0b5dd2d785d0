"""pre-commit for paritybot, one phase per call, inside the run's image.

It runs under pre-commit's own interpreter in isolated mode (``python -I``: neither the working
directory nor the user's site-packages is importable, so a pull request's files cannot stand in
for pre-commit), uses the standard library and pre-commit only, and stays valid on Python 3.8.

    install CONFIG              install the hook environments CONFIG names, in a scratch repository
    classify CONFIG LIST OUT    which files of LIST each hook applies to, as JSON into OUT
    run CONFIG HOOK_ID LIST     ``pre-commit run HOOK_ID`` on the files of LIST; exits with its status

CONFIG is the text of ``.pre-commit-config.yaml`` that paritybot read from the commit's git
objects. It is written to a fresh temporary directory for each call and never read from the
workspace, which a hook that ran earlier may have rewritten. LIST is a file of NUL-separated paths
relative to the repository root.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

# Written into the store once every hook environment is installed; a later install step then ends
# at once (runner/checks/precommit.py).
INSTALLED_MARK = "paritybot-installed"


def _with_config(phase):
    """Call ``phase(directory, config_path, *args)`` with the config written to a fresh temporary
    directory, removed afterwards: on the host runner it would outlive the run otherwise."""

    def call(config_text, *args):
        with tempfile.TemporaryDirectory(prefix="paritybot-pre-commit-") as directory:
            path = os.path.join(directory, ".pre-commit-config.yaml")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(config_text)
            return phase(directory, path, *args)

    return call


def _read_list(path):
    with open(path, "rb") as fh:
        return [p for p in fh.read().decode("utf-8", "surrogateescape").split("\0") if p]


@_with_config
def install(directory, path):
    """Only the config is here: no file of the pull request can take part in the install."""
    # pre-commit works inside a git repository; this one holds nothing.
    subprocess.run(["git", "init", "-q", directory], check=True)
    previous = os.getcwd()
    os.chdir(directory)
    from pre_commit.main import main

    try:
        status = main(["install-hooks", "--config", path])
    finally:
        os.chdir(previous)  # out of the directory before it is removed
    # A contributor's own cache (PRE_COMMIT_HOME, a local run) serves other configs: never marked.
    if status == 0 and not os.environ.get("PARITYBOT_PRE_COMMIT_NO_MARK"):
        open(os.path.join(os.environ["PRE_COMMIT_HOME"], INSTALLED_MARK), "w").close()
    return status


@_with_config
def classify(_directory, path, list_path, out_path):
    """pre-commit's own choice of files per hook, made before any hook can run in this container."""
    import pre_commit.constants as C
    from pre_commit.clientlib import load_config
    from pre_commit.commands.run import Classifier
    from pre_commit.repository import all_hooks
    from pre_commit.store import Store

    files = _read_list(list_path)
    config = load_config(path)
    classifier = Classifier.from_config(files, config["files"], config["exclude"])
    # `pre-commit run` runs the hooks of this stage; its name changed in pre-commit 3.2, and the
    # list of stages moved from constants to clientlib.
    from pre_commit import clientlib

    stages = getattr(clientlib, "STAGES", getattr(C, "STAGES", ()))
    stage = "pre-commit" if "pre-commit" in stages else "commit"
    hooks = []
    for hook in all_hooks(config, Store()):
        chosen = set(classifier.filenames_for_hook(hook))
        hooks.append(
            {
                "id": hook.id,
                "name": hook.name,
                "runs": not hook.stages or stage in hook.stages,
                "always_run": bool(hook.always_run),
                "fail_fast": bool(getattr(hook, "fail_fast", False)),
                "files": "".join("1" if f in chosen else "0" for f in files),
            }
        )
    result = {
        "python": sys.executable,
        "version": C.VERSION,
        "fail_fast": bool(config.get("fail_fast", False)),
        "hooks": hooks,
    }
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    return 0


@_with_config
def run(directory, path, hook_id, list_path):
    # Given files, pre-commit checks exactly those and never stashes (which would write into its
    # store, read-only here). A hook that runs with no file gets a path that does not exist: pre-commit
    # drops it, where an empty --files would mean "the staged files" and stash.
    files = [os.path.join(".", f) for f in _read_list(list_path)] or [os.path.join(directory, "no-file")]
    from pre_commit.main import main

    # "./" keeps a file named like an option (-h, --all-files) a file; "--" does the same for the id.
    return main(["run", "--config", path, "--color", "never", "--files", *files, "--", hook_id])


COMMANDS: dict[str, Callable[..., int]] = {"install": install, "classify": classify, "run": run}

if __name__ == "__main__":
    sys.exit(COMMANDS[sys.argv[1]](*sys.argv[2:]))
