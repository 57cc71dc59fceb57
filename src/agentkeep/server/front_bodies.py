"""Request bodies at a worker's front (:mod:`.cluster_front`): read once, replayed to the app.

The front reads a body before handing the request on — ``POST /v1/sessions`` to route it by
a client-chosen ``sessionId``, a forwarded request to send it — so the same bytes must reach
the app that answers. Invariant: a body is refused past
:data:`~agentkeep.server.security.MAX_BODY_BYTES` while it streams in, as the apps' own
reading refuses it, so routing never holds more than that in memory.
"""

from __future__ import annotations

import msgspec
from starlette.requests import Request
from starlette.types import Message, Receive, Scope

from agentkeep.server.errors import ApiError
from agentkeep.server.security import MAX_BODY_BYTES

__all__ = ["named_session", "read_body", "replay"]


async def read_body(scope: Scope, receive: Receive) -> bytes:
    """The request's body, refused past :data:`MAX_BODY_BYTES` while it is read (a body
    without a length is counted as it streams in, as the apps' own reading does)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in Request(scope, receive).stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(
                413,
                "payload_too_large",
                f"The body is over the limit of {MAX_BODY_BYTES} bytes.",
                {"limit": MAX_BODY_BYTES},
            )
        chunks.append(chunk)
    return b"".join(chunks)


def named_session(body: bytes) -> str | None:
    """The client-chosen ``sessionId`` of a ``POST /v1/sessions`` body, if any (a body that
    does not parse is left to the app, which refuses it)."""
    try:
        decoded = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    named = decoded.get("sessionId") if isinstance(decoded, dict) else None
    return named if isinstance(named, str) else None


def replay(body: bytes, then: Receive) -> Receive:
    """A ``receive`` giving ``body`` again (it was read to choose the partition), then the
    connection's own (its disconnect)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await then()

    return receive
