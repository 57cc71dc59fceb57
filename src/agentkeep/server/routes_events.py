"""The session event ledger over HTTP: pages, and the SSE stream that never loses an event.

``GET /v1/sessions/{id}/events/stream`` sends the committed backlog after ``after`` and then
live events as they commit, each as one SSE event whose ``id`` is its sequence and whose
``data`` is the event's JSON (no ``event:`` name, so a browser's ``onmessage`` sees them all).
``turn_id`` keeps one turn's events; with ``until_turn_end`` the stream closes after that
turn's terminal ``turn.*`` event (at once, if the client has already seen it).
A reconnecting client sends ``Last-Event-ID`` (browsers do it by themselves), which wins over
``after``: it resumes exactly after the last event it saw, with no gap and no duplicate, from
any sequence, forever (no TTL; the ledger is append-only). A heartbeat comment keeps idle
connections open. Shutdown ends every stream (see :class:`~agentkeep.server.context.OpenStreams`).
Live ``text.delta`` events (ephemeral: ``sequence`` 0, never stored or replayed) are sent
without an SSE ``id`` unless ``ephemeral=false``; with a ``turn_id`` filter they are kept only
if they name that turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from sse_starlette import EventSourceResponse, ServerSentEvent
from sse_starlette.sse import SendTimeoutError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agentkeep.agent_system import AgentSystem
from agentkeep.server.context import SaturatedError, call, context
from agentkeep.server.errors import ApiError, json_response
from agentkeep.server.limits import LogBudget
from agentkeep.server.openapi import EVENT_STREAM, Operation, Param, path_id
from agentkeep.server.requests import query_bool, query_int, query_str
from agentkeep.server.sse import EventBridge
from agentkeep.server.wire import EventList, event_out
from agentkeep.types.ledger import MAX_EVENTS_PAGE
from agentkeep.types.turns import TERMINAL_STATUSES, turn_event_type

_MAX_SEQUENCE = 2**63 - 1
_ID = path_id("The session's id (an agent id).")
_AFTER = Param(
    name="after",
    where="query",
    schema={"type": "integer", "minimum": 0, "maximum": _MAX_SEQUENCE},
    description="Only events with a sequence above this (default 0: from the start).",
)
_encoder = msgspec.json.Encoder()
_TURN_ENDS = frozenset(turn_event_type(status) for status in TERMINAL_STATUSES)


async def list_events(request: Request) -> Response:
    """GET /v1/sessions/{id}/events: a page of committed events in sequence order."""
    after = query_int(request, "after", default=0, low=0, high=_MAX_SEQUENCE)
    limit = query_int(request, "limit", default=100, low=1, high=MAX_EVENTS_PAGE)
    system = context(request).system
    events = await call(system.events, request.path_params["id"], after=after, limit=limit)
    next_after = events[-1].sequence if len(events) == limit else None
    return json_response(EventList(events=[event_out(e) for e in events], next_after=next_after))


def _resume_point(request: Request) -> int:
    """``Last-Event-ID`` if sent (a reconnect), else ``after``."""
    last = request.headers.get("last-event-id")
    if last is None:
        return query_int(request, "after", default=0, low=0, high=_MAX_SEQUENCE)
    text = last.strip()
    if not text.isascii() or not text.isdigit() or int(text) > _MAX_SEQUENCE:
        raise ApiError(
            422,
            "invalid_last_event_id",
            f"Last-Event-ID must be an event sequence (an integer >= 0), got {last!r}.",
            {"field": "Last-Event-ID"},
        )
    return int(text)


def _end_ahead(system: AgentSystem, session_id: str, turn_id: str, after: int) -> bool:
    """Whether the ended turn's terminal event lies after ``after`` (the stream will send it)."""
    while page := system.events(session_id, after=after, limit=MAX_EVENTS_PAGE):
        if any(e.turn_id == turn_id and e.type in _TURN_ENDS for e in page):
            return True
        after = page[-1].sequence
    return False


async def _nothing() -> AsyncIterator[ServerSentEvent]:
    return
    yield  # an async generator that ends at once


async def stream_events(request: Request) -> Response:
    """GET /v1/sessions/{id}/events/stream: backlog, then live (SSE)."""
    session_id = request.path_params["id"]
    after = _resume_point(request)
    turn_id = query_str(request, "turn_id")
    until_turn_end = query_bool(request, "until_turn_end")
    ctx = context(request)
    if until_turn_end:
        if turn_id is None:
            raise ApiError(
                422,
                "invalid_query",
                "until_turn_end needs turn_id (the turn whose end closes the stream).",
                {"field": "until_turn_end"},
            )
        turn = await call(ctx.system.sessions.turn, session_id, turn_id)
        if turn.terminal and not await call(_end_ahead, ctx.system, session_id, turn_id, after):
            return EventSourceResponse(_nothing(), ping=ctx.heartbeat_seconds, sep="\n")
    # Live text deltas unless asked not to: ephemeral events (never stored, never replayed)
    # go out without an SSE id, so a reconnect's Last-Event-ID is always a durable sequence.
    deltas = request.query_params.get("ephemeral") is None or query_bool(request, "ephemeral")
    if len(ctx.streams) >= ctx.max_streams:
        raise SaturatedError(f"{ctx.max_streams} open streams")
    subscription = await call(ctx.system.subscribe, session_id, after=after, ephemeral=deltas)
    bridge = EventBridge(
        subscription,
        ctx.system.internals.surfaces,
        asyncio.get_running_loop(),
        encode=lambda event: _encoder.encode(event_out(event)),
        keep=lambda event: turn_id is None or event.turn_id == turn_id,
        max_bytes=ctx.stream_buffer_bytes,
        stall_seconds=ctx.stream_stall_seconds,
        on_overflow=ctx.streams.note_overflow,
        poll_seconds=ctx.stream_poll_seconds,
    )
    key = ctx.streams.add(bridge.stop, buffered=lambda: bridge.buffered[1])
    if key is None:
        subscription.close()
        raise ApiError(503, "shutting_down", "The daemon is shutting down; reconnect later.")

    async def frames() -> AsyncIterator[ServerSentEvent]:
        bridge.start()  # only once the stream is sent: a HEAD never starts it
        last = after
        async for frame in bridge:
            event = frame.event
            if event.ephemeral:
                yield ServerSentEvent(data=frame.data)  # no id: it moves no resume point
                continue
            last = event.sequence
            yield ServerSentEvent(data=frame.data, id=str(event.sequence))
            if until_turn_end and event.type in _TURN_ENDS:
                return  # the turn is terminal: its last event was sent
        if bridge.overflowed:
            yield _resume_event(last)

    def ended() -> None:
        bridge.stop()
        ctx.streams.remove(key)

    return _Stream(
        frames(),
        on_end=ended,
        budget=ctx.log_budget,
        ping=ctx.heartbeat_seconds,
        sep="\n",
        send_timeout=ctx.stream_send_timeout_seconds,
    )


def _resume_event(last: int) -> ServerSentEvent:
    """The last frame of a stream whose client fell behind: reconnect from ``last``."""
    data = {
        "reason": "slow_consumer",
        "lastEventId": str(last),
        "message": (
            "The client fell behind the stream's buffer; reconnect with "
            f"Last-Event-ID: {last} to resume with no gap."
        ),
    }
    return ServerSentEvent(data=_encoder.encode(data).decode(), event="resume", id=str(last))


class _Stream(EventSourceResponse):
    """An SSE response that runs ``on_end`` however it ends: sent, cut, timed out, or a
    ``HEAD`` (which never iterates the body), so no stream outlives its request."""

    def __init__(
        self,
        content: AsyncIterator[ServerSentEvent],
        *,
        on_end: Callable[[], None],
        budget: LogBudget,
        **options: Any,
    ) -> None:
        super().__init__(content, **options)
        self._on_end = on_end
        self._budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:  # the client stopped reading: drop it, quietly
            client = scope.get("client")
            self._budget.info(client[0] if client else None, "sse_send_timeout")
        finally:
            self._on_end()


OPERATIONS = (
    Operation(
        method="GET",
        path="/v1/sessions/{id}/events",
        operation_id="listEvents",
        summary="A page of the session's committed events, in sequence order.",
        handler=list_events,
        params=(
            _ID,
            _AFTER,
            Param(
                name="limit",
                where="query",
                schema={"type": "integer", "minimum": 1, "maximum": MAX_EVENTS_PAGE},
                description=f"At most this many (default 100, at most {MAX_EVENTS_PAGE}).",
            ),
        ),
        responses={200: EventList},
    ),
    Operation(
        method="GET",
        path="/v1/sessions/{id}/events/stream",
        operation_id="streamEvents",
        summary="Server-sent events: the committed backlog, then live events (id = sequence).",
        handler=stream_events,
        params=(
            _ID,
            _AFTER,
            Param(
                name="turn_id",
                where="query",
                schema={"type": "string"},
                description="Only the events of this turn.",
            ),
            Param(
                name="until_turn_end",
                where="query",
                schema={"type": "boolean"},
                description="Close the stream after turn_id's terminal event.",
            ),
            Param(
                name="ephemeral",
                where="query",
                schema={"type": "boolean"},
                description=(
                    "Also send live text.delta events (sequence 0, no SSE id, never "
                    "replayed); default true."
                ),
            ),
            Param(
                name="Last-Event-ID",
                where="header",
                schema={"type": "string"},
                description="The last sequence received (a reconnect); wins over after.",
            ),
        ),
        responses={200: EVENT_STREAM},
    ),
)
