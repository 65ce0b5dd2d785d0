"""A fake api.github.com for tests: real HTTP on loopback, checked against GitHub's REST description.

Beside the API it serves GitHub's website where a browser meets it (``fake.web``, its own
address): the App's user authorization (OAuth web flow) and registering an App from a manifest.

Vendored data it relies on lives in ``tests/fixtures/github/`` (see the README there).
"""

from .server import FakeGitHub
from .spec import MAX_COMMENT_BODY, MAX_PER_PAGE, RestSpec, rest_spec
from .state import Call, CheckRun, Comment, Installation, PullFile, PullRequest, Reaction, Repo, Violation

__all__ = [
    "MAX_COMMENT_BODY",
    "MAX_PER_PAGE",
    "Call",
    "CheckRun",
    "Comment",
    "FakeGitHub",
    "Installation",
    "PullFile",
    "PullRequest",
    "Reaction",
    "Repo",
    "RestSpec",
    "Violation",
    "rest_spec",
]
