"""All handlers, one router per concern, combined (like CPython's bedevere)."""

from __future__ import annotations

from gidgethub import routing

from handlers import check_run, comments, installation, pull_request, push

router = routing.Router(
    pull_request.router,
    comments.router,
    check_run.router,
    installation.router,
    push.router,
)
