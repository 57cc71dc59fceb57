"""Turns over HTTP: send a message, read turns, cancel (docs/daemon.md, "Routes").

``POST /v1/sessions/{id}/messages`` accepts a message as a turn once it is durable:

- ``wait: false`` → **202** with ``Location: /v1/sessions/{id}/turns/{turn_id}`` (the turn as
  accepted: ``queued``, or already ``running`` — docs/turns.md says when);
- ``wait: true`` (the default) → **200** with the terminal turn; a turn still
  live when the server's wait ends (or the daemon stops) is a 202 with its ``Location``;
- the ``Idempotency-Key`` header is an alias of the body's ``idempotencyKey`` (both given
  and different: 422; a non-ASCII header: 400 ``invalid_header``, send such a key in the
  body). A key sent again with the same input returns its turn with
  ``duplicate: true`` and **200**, and the driver is never invoked twice; with a different
  input it is a 422 (``idempotency_conflict``). Keys are never released.

A send that waits holds no thread: it waits on the event loop for the ledger hub to announce
the session's next commit (:meth:`~agentkeep.agent_system.surfaces.SurfaceReader.watch`), re-reads
the turn, and ends promptly at shutdown, or when its client leaves, with the turn as it
stands. Past :attr:`~agentkeep.server.context.ServerContext.max_waiting` waiting sends a new
one is refused with a 503 ``saturated`` + ``Retry-After`` before anything is written.
A cancel waits for the abort on a thread of its own (refused the same way past
``wait_threads``).
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.requests import Request
from starlette.responses import Response

from agentkeep.server.context import SaturatedError, ServerContext, call, call_waiting, context
from agentkeep.server.errors import ApiError, json_response
from agentkeep.server.openapi import Operation, Param, path_id
from agentkeep.server.requests import ascii_header, json_body, query_int
from agentkeep.server.turn_wire import (
    IDEMPOTENCY_KEY_HEADER,
    CancelRequest,
    SendMessage,
    SentTurnOut,
    TurnList,
    TurnOut,
    to_user_message,
    turn_out,
)
from agentkeep.sessions import Sessions, TurnHandle
from agentkeep.tracing import remote_parent
from agentkeep.types.turns import TurnRecord

_ID = path_id("The session's id (an agent id).")
_TURN_ID = path_id("The turn.", name="turn_id")
_SLICE_SECONDS = 0.5


async def _wait(
    request: Request, ctx: ServerContext, session_id: str, turn: TurnRecord
) -> TurnRecord:
    """The turn once terminal, or as it stands when the wait ends, the daemon stops or the
    client leaves; waits on the event loop, woken by the session's commits."""
    sessions = ctx.system.sessions
    surfaces = ctx.system.internals.surfaces
    loop = asyncio.get_running_loop()
    moved = asyncio.Event()

    def wake() -> None:  # from the committing thread
        with contextlib.suppress(RuntimeError):  # the loop has closed
            loop.call_soon_threadsafe(moved.set)

    unwatch = surfaces.watch(session_id, wake)
    deadline = loop.time() + ctx.wait_seconds
    try:
        while True:
            moved.clear()  # before the read: a commit after it wakes the wait below
            turn = await call(sessions.turn, session_id, turn.id)
            remaining = deadline - loop.time()
            if turn.terminal or remaining <= 0 or ctx.streams.closed or surfaces.closed:
                return turn
            try:
                await asyncio.wait_for(moved.wait(), min(_SLICE_SECONDS, remaining))
            except TimeoutError:
                if await request.is_disconnected():
                    return turn  # nobody is waiting for the answer any more
    finally:
        unwatch()


def _idempotency_key(request: Request, body: SendMessage) -> str | None:
    header = ascii_header(request, "Idempotency-Key")  # a non-ASCII value: 400
    if header is None:
        return body.idempotency_key
    if body.idempotency_key is not None and body.idempotency_key != header:
        raise ApiError(
            422,
            "invalid_request",
            "The Idempotency-Key header and the body's idempotencyKey differ.",
            {"field": "idempotencyKey"},
        )
    return header


async def send_message(request: Request) -> Response:
    """POST /v1/sessions/{id}/messages: a turn (module doc)."""
    session_id = request.path_params["id"]
    body = await json_body(request, SendMessage)
    key = _idempotency_key(request, body)
    message = to_user_message(body.message)
    ctx = context(request)
    sessions: Sessions = ctx.system.sessions
    if body.wait and ctx.waiting >= ctx.max_waiting:
        raise SaturatedError(f"{ctx.max_waiting} waiting requests")
    headers = request.headers

    def send() -> TurnHandle:
        # A W3C ``traceparent`` header parents the turn's spans (docs/observability.md).
        with remote_parent(headers):
            return sessions.send(
                session_id,
                message,
                idempotency_key=key,
                delivery=body.delivery,
                metadata=body.metadata,
                message_id=body.message_id,
                options=body.options(),
            )

    sent = await call(send)
    turn = sent.turn
    if body.wait and not turn.terminal:
        ctx.waiting += 1
        try:
            turn = await _wait(request, ctx, session_id, turn)
        finally:
            ctx.waiting -= 1
    status = 200 if turn.terminal or sent.duplicate else 202
    return json_response(
        SentTurnOut(turn=turn_out(turn), duplicate=sent.duplicate),
        status,
        {"Location": f"/v1/sessions/{session_id}/turns/{turn.id}"},
    )


async def list_turns(request: Request) -> Response:
    """GET /v1/sessions/{id}/turns: the session's turns by number."""
    after = query_int(request, "after", default=0, low=0, high=2**63 - 1)
    limit = query_int(request, "limit", default=100, low=1, high=1000)
    sessions = context(request).system.sessions
    turns = await call(sessions.turns, request.path_params["id"], after=after, limit=limit)
    next_after = turns[-1].number if len(turns) == limit else None
    return json_response(TurnList(turns=[turn_out(t) for t in turns], next_after=next_after))


async def get_turn(request: Request) -> Response:
    """GET /v1/sessions/{id}/turns/{turn_id}."""
    sessions = context(request).system.sessions
    turn = await call(sessions.turn, request.path_params["id"], request.path_params["turn_id"])
    return json_response(turn_out(turn))


async def cancel_turn(request: Request) -> Response:
    """POST /v1/sessions/{id}/cancel: cancel the active turn (or ``turnId``)."""
    ask = await json_body(request, CancelRequest, empty_ok=True)
    ctx = context(request)
    turn = await call_waiting(
        ctx,
        ctx.system.sessions.cancel,
        request.path_params["id"],
        ask.turn_id,
        timeout_seconds=ctx.wait_seconds,
    )
    return json_response(turn_out(turn))


OPERATIONS = (
    Operation(
        method="POST",
        path="/v1/sessions/{id}/messages",
        operation_id="sendMessage",
        summary="Send a message as a turn (wait: false → 202 + Location; a replayed key → 200).",
        handler=send_message,
        params=(
            _ID,
            Param(
                name="Idempotency-Key",
                where="header",
                schema=IDEMPOTENCY_KEY_HEADER,
                description="An alias of the body's idempotencyKey: printable ASCII (send "
                "other text as the body's idempotencyKey).",
            ),
        ),
        body=SendMessage,
        responses={200: SentTurnOut, 202: SentTurnOut},
    ),
    Operation(
        method="GET",
        path="/v1/sessions/{id}/turns",
        operation_id="listTurns",
        summary="The session's turns, in order.",
        handler=list_turns,
        params=(
            _ID,
            Param(
                name="after",
                where="query",
                schema={"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                description="Only turns numbered above this.",
            ),
            Param(
                name="limit",
                where="query",
                schema={"type": "integer", "minimum": 1, "maximum": 1000},
                description="At most this many (default 100).",
            ),
        ),
        responses={200: TurnList},
    ),
    Operation(
        method="GET",
        path="/v1/sessions/{id}/turns/{turn_id}",
        operation_id="getTurn",
        summary="One turn.",
        handler=get_turn,
        params=(_ID, _TURN_ID),
        responses={200: TurnOut},
    ),
    Operation(
        method="POST",
        path="/v1/sessions/{id}/cancel",
        operation_id="cancelTurn",
        summary="Cancel the active turn (or turnId); returns it once cancelled.",
        handler=cancel_turn,
        params=(_ID,),
        body=CancelRequest,
        body_required=False,
        responses={200: TurnOut},
    ),
)
