"""The Starlette app: the route table, the guard, the error envelope and the access log.

:func:`create_app` makes an app over an open :class:`~agentkeep.AgentSystem` that it does
not own (its embedder closes it). Middleware, outermost first: the access log (one
structured line per request on stderr: method, path, status, duration — never a header, so
never the token, and never the query), then the :class:`~agentkeep.server.security.Guard`.
Every error leaves as the error envelope of docs/daemon.md, the router's own 404 and 405 included.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentkeep.agent_system import AgentSystem
from agentkeep.logs import get_logger
from agentkeep.server import (
    console_pages,
    routes_agents,
    routes_console,
    routes_events,
    routes_sessions,
    routes_turns,
)
from agentkeep.server.console_auth import ConsoleSessions
from agentkeep.server.context import ServerContext
from agentkeep.server.errors import ApiError, error_response, json_response
from agentkeep.server.limits import LogBudget
from agentkeep.server.metrics import OPERATIONS as METRICS_OPERATIONS
from agentkeep.server.openapi import Handler, Operation, document
from agentkeep.server.security import Guard, SecurityPolicy
from agentkeep.server.wire import Health

log = get_logger("agentkeep.server.access")

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def healthz(request: Request) -> Response:
    """GET /healthz: unauthenticated liveness, nothing else.

    503 once the store stopped accepting writes for good while running (its database file
    was deleted or replaced: ``store_replaced``), so a supervisor restarts the daemon.
    """
    context: ServerContext = request.app.state.agentkeep
    refusal = context.system.internals.surfaces.refusal
    if refusal is not None:
        return error_response(ApiError(503, refusal.code, str(refusal)))
    return json_response(Health())


async def openapi_json(request: Request) -> Response:
    """GET /v1/openapi.json: the API's OpenAPI 3.1 document."""
    body: bytes = request.app.state.openapi
    return Response(body, media_type="application/json")


def operations() -> tuple[Operation, ...]:
    """Every route the app serves, as documented in ``/v1/openapi.json``."""
    return (
        Operation(
            method="GET",
            path="/healthz",
            operation_id="healthz",
            summary="Liveness (no token needed).",
            handler=healthz,
            responses={200: Health},
            auth=False,
        ),
        Operation(
            method="GET",
            path="/v1/openapi.json",
            operation_id="openapi",
            summary="This document.",
            handler=openapi_json,
            responses={200: dict[str, Any]},
        ),
        *METRICS_OPERATIONS,
        *routes_agents.OPERATIONS,
        *routes_sessions.OPERATIONS,
        *routes_turns.OPERATIONS,
        *routes_events.OPERATIONS,
        *routes_console.OPERATIONS,
    )


def routes(ops: Sequence[Operation]) -> list[Route]:
    """One route per path serving all of its methods, so the router's 405 for any other
    method carries an ``Allow`` header naming every one of them (one route per operation
    would name only the first route's). HEAD goes to the GET handler, as Starlette does."""
    by_path: dict[str, dict[str, Handler]] = {}
    for op in ops:
        by_path.setdefault(op.path, {})[op.method] = op.handler
    return [
        Route(path, _dispatch(handlers), methods=list(handlers))
        for path, handlers in by_path.items()
    ]


def _dispatch(handlers: dict[str, Handler]) -> Handler:
    async def endpoint(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await handlers[method](request)

    return endpoint


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc, getattr(exc, "headers", None))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = "No such route." if exc.status_code == 404 else str(exc.detail)
    return error_response(ApiError(exc.status_code, code, message), dict(exc.headers or {}))


def _client_host(request: Request) -> str | None:
    return request.client.host if request.client else None


async def _client_gone(request: Request, exc: Exception) -> Response:
    """The client left while its request was read: nobody reads the answer; the access log
    records a 499 (within the client's log budget) and nothing is an error."""
    return Response(status_code=499)


async def _internal_error(request: Request, exc: Exception) -> Response:
    budget: LogBudget = request.app.state.agentkeep.log_budget
    if budget.take(_client_host(request)) is not None:
        log.error("request_failed", path=request.url.path, error=repr(exc))
    return error_response(
        ApiError(500, "internal_error", "The server failed to handle the request.")
    )


class AccessLog:
    """One structured log line per request, when its response has been sent, within the
    client's :class:`~agentkeep.server.limits.LogBudget` (past it, lines are dropped and the
    next one allowed counts them in ``suppressed``)."""

    def __init__(self, app: ASGIApp, budget: LogBudget | None = None) -> None:
        self.app = app
        self.budget = budget or LogBudget()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, noting its status and duration."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 0

        async def noting(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting)
        except Exception:
            # Not answered yet: Starlette's outermost error middleware answers it with a 500.
            if status == 0:
                status = 500
            raise
        finally:
            client = scope.get("client")
            suppressed = self.budget.take(client[0] if client else None)
            if suppressed is not None:
                log.info(
                    "http_request",
                    method=scope["method"],
                    path=scope["path"],
                    status=status,
                    duration_ms=round((time.monotonic() - started) * 1000, 2),
                    client=f"{client[0]}:{client[1]}" if client else None,
                    **({"suppressed": suppressed} if suppressed else {}),
                )


def create_app(
    system: AgentSystem,
    policy: SecurityPolicy,
    *,
    heartbeat_seconds: float = 15.0,
    wait_seconds: float = 120.0,
    log_budget: LogBudget | None = None,
    console: ConsoleSessions | None = None,
) -> Starlette:
    """The daemon's ASGI app over ``system`` (which the caller keeps owning and closes).

    Args:
        system: An open system.
        policy: The token, the allowed hosts and origins, the body limit.
        heartbeat_seconds: Seconds between SSE heartbeat comments.
        wait_seconds: The longest a waiting request (``compact`` with ``wait``) waits.
        log_budget: The per-client budget of access-log lines (a fresh one by default).
        console: The console's sign-in codes and sessions (by default one keyed by the
            policy's token); it is ``app.state.console``.

    Returns:
        The app; ``app.state.agentkeep`` is its :class:`ServerContext` (its ``streams`` are
        what :meth:`~agentkeep.server.context.OpenStreams.close_all` ends at shutdown).
    """
    ops = operations()
    budget = log_budget or LogBudget()
    console = console or ConsoleSessions(policy.token)
    app = Starlette(
        routes=[*routes(ops), *console_pages.routes()],
        middleware=[
            Middleware(AccessLog, budget=budget),
            Middleware(Guard, policy=policy, console=console),
        ],
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            ClientDisconnect: _client_gone,
            Exception: _internal_error,
        },
    )
    app.state.agentkeep = ServerContext(
        system=system,
        heartbeat_seconds=heartbeat_seconds,
        wait_seconds=wait_seconds,
        log_budget=budget,
    )
    app.state.console = console
    app.state.openapi = msgspec.json.encode(document(ops, version=_version()))
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentkeep")
    except PackageNotFoundError:
        return "0"
