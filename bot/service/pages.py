"""HTML pages of the service: Jinja2 templates (escaped by default), one stylesheet, no script.

Every page is sent with a Content-Security-Policy that allows no script at all and styles only
from this site, so nothing a page shows (a repository's name, a run's error) can run or restyle it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from importlib import resources
from typing import Any

import jinja2
from aiohttp import web

CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; "
    "frame-ancestors 'none'; form-action 'self' {forms}"
)
STATIC = resources.files("bot.service") / "static"


def _age(moment: datetime | None, now: datetime) -> str:
    """``3 min ago`` for a time in the past (``—`` for none)."""
    if moment is None:
        return "—"
    return duration((now - moment).total_seconds()) + " ago"


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("bot.service", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
_env.filters["duration"] = duration


def render(
    template: str,
    *,
    status: int = 200,
    forms: str = "",
    headers: dict[str, str] | None = None,
    **context: Any,
) -> web.Response:
    """A page from ``template``; ``forms``: another site the page's forms may post to (GitHub's)."""
    now = datetime.now(UTC)
    html = _env.get_template(template).render(now=now, age=lambda m: _age(m, now), **context)
    response = web.Response(text=html, content_type="text/html", status=status, headers=headers)
    response.headers["Content-Security-Policy"] = CSP.format(forms=forms).strip()
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Cache-Control"] = "no-store"
    return response


async def stylesheet(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in ("paritybot.css",):
        raise web.HTTPNotFound()
    css = (STATIC / name).read_text()
    return web.Response(text=css, content_type="text/css", headers={"Cache-Control": "max-age=3600"})


def add_static_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/static/{name}", stylesheet)
