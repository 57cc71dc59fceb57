"""The API routes the console needs beyond the rest: a definition's revision history, and a
fresh one-time sign-in link (for when the one ``serve`` printed was used or expired).

``GET /v1/agents/{id}/revisions`` pages a definition's immutable revisions in number order
(the console shows what changed between consecutive ones). ``POST /v1/console/links`` mints
a one-time code (:mod:`agentkeep.server.console_auth`); it needs the daemon's token like
every ``/v1`` route, so only someone who already holds it can make a link.
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from agentkeep.server.console_auth import CODE_SECONDS, ConsoleSessions
from agentkeep.server.context import call, context
from agentkeep.server.errors import json_response
from agentkeep.server.openapi import Operation, Param, path_id
from agentkeep.server.requests import query_int
from agentkeep.server.wire import RevisionOut, revision_out

#: The path of the sign-in page, which redeems a code.
SIGNIN_PATH = "/console/signin"
_MAX_PAGE = 1000


class _Out(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A response body: the wire's camelCase names."""


class RevisionList(_Out, frozen=True, kw_only=True):
    """A page of a definition's revisions in number order; ``nextAfter`` is the last number
    of a full page (None when the page was not full)."""

    revisions: list[RevisionOut]
    next_after: int | None


class SigninLink(_Out, frozen=True, kw_only=True):
    """A one-time sign-in link: ``path`` (with its code) on this daemon, and how many seconds
    it stays valid."""

    path: str
    expires_in_seconds: float


def signin_path(console: ConsoleSessions) -> str:
    """A fresh one-time sign-in path (``/console/signin?code=…``)."""
    return f"{SIGNIN_PATH}?code={console.issue()}"


async def list_revisions(request: Request) -> Response:
    """GET /v1/agents/{id}/revisions: a page of revisions, oldest first."""
    after = query_int(request, "after", default=0, low=0, high=2**31)
    limit = query_int(request, "limit", default=100, low=1, high=_MAX_PAGE)
    registry = context(request).system.registry
    found = await call(registry.revisions, request.path_params["id"], after=after, limit=limit)
    next_after = found[-1].number if len(found) == limit else None
    return json_response(
        RevisionList(revisions=[revision_out(r) for r in found], next_after=next_after)
    )


async def create_link(request: Request) -> Response:
    """POST /v1/console/links: a new one-time sign-in link."""
    console: ConsoleSessions = request.app.state.console
    return json_response(
        SigninLink(path=signin_path(console), expires_in_seconds=CODE_SECONDS), 201
    )


OPERATIONS = (
    Operation(
        method="GET",
        path="/v1/agents/{id}/revisions",
        operation_id="listAgentRevisions",
        summary="A definition's revisions in number order (its history).",
        handler=list_revisions,
        params=(
            path_id("The definition's id."),
            Param(
                name="after",
                where="query",
                schema={"type": "integer", "minimum": 0, "maximum": 2**31},
                description="Only revisions numbered above this (default 0).",
            ),
            Param(
                name="limit",
                where="query",
                schema={"type": "integer", "minimum": 1, "maximum": _MAX_PAGE},
                description=f"At most this many (default 100, at most {_MAX_PAGE}).",
            ),
        ),
        responses={200: RevisionList},
    ),
    Operation(
        method="POST",
        path="/v1/console/links",
        operation_id="createConsoleLink",
        summary="A one-time sign-in link for the console (single use, short expiry).",
        handler=create_link,
        body_required=False,
        responses={201: SigninLink},
    ),
)
