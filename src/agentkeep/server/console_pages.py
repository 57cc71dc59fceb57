"""The console's pages: static files from the package, the sign-in step and sign-out.

``GET /`` is the console (``console/index.html``); ``GET /console/static/{name}`` serves the
other files of :file:`agentkeep/server/console/` (plain HTML, CSS and JavaScript modules, no
build step), by exact name from the package's own listing — never a path from the request.
Neither holds a secret, so neither needs a credential: every ``/v1`` call the page makes does.

``GET /console/signin?code=…`` redeems a one-time code (:mod:`.console_auth`) and answers
303 to ``/`` with the session cookie; ``POST /console/signout`` ends that session. Every
console response forbids framing, sniffing and referrers, and its Content-Security-Policy
allows only this origin's scripts and styles (no inline script, no ``eval``).
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from agentkeep.server.console_auth import (
    COOKIE_NAME,
    CSRF_HEADER,
    SESSION_SECONDS,
    ConsoleSessions,
    cookie_value,
)
from agentkeep.server.errors import ApiError, error_response
from agentkeep.server.routes_console import SIGNIN_PATH

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
#: Headers on every console response.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _files() -> dict[str, tuple[bytes, str]]:
    """Every console file by name, with its media type (read once, at app creation)."""
    folder = resources.files("agentkeep.server") / "console"
    found: dict[str, tuple[bytes, str]] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _TYPES:
            found[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return found


def _console(request: Request) -> ConsoleSessions:
    sessions: ConsoleSessions = request.app.state.console
    return sessions


def routes() -> list[Route]:
    """The console's routes (outside ``/v1`` and outside the OpenAPI document)."""
    files = _files()

    async def index(request: Request) -> Response:
        body, media = files["index.html"]
        return Response(body, media_type=media, headers=HEADERS)

    async def static(request: Request) -> Response:
        found = files.get(request.path_params["name"])
        if found is None:
            return error_response(ApiError(404, "not_found", "No such console file."), HEADERS)
        return Response(found[0], media_type=found[1], headers=HEADERS)

    async def signin(request: Request) -> Response:
        credential = _console(request).redeem(request.query_params.get("code", ""))
        if credential is None:
            body, media = files["signin-failed.html"]
            return Response(body, status_code=403, media_type=media, headers=HEADERS)
        response = Response(status_code=303, headers={**HEADERS, "Location": "/"})
        response.set_cookie(
            COOKIE_NAME,
            credential,
            max_age=int(SESSION_SECONDS),
            path="/",
            httponly=True,
            samesite="strict",
        )
        return response

    async def signout(request: Request) -> Response:
        if request.headers.get(CSRF_HEADER) != "1":
            return error_response(
                ApiError(403, "forbidden", f"Sign-out needs the {CSRF_HEADER} header."), HEADERS
            )
        headers = {name.encode(): [value.encode()] for name, value in request.headers.items()}
        credential = cookie_value(headers, COOKIE_NAME)
        if credential is not None:
            _console(request).revoke(credential)
        response = Response(status_code=204, headers=HEADERS)
        response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict")
        return response

    return [
        Route("/", index, methods=["GET"]),
        Route("/console/static/{name}", static, methods=["GET"]),
        Route(SIGNIN_PATH, signin, methods=["GET"]),
        Route("/console/signout", signout, methods=["POST"]),
    ]
