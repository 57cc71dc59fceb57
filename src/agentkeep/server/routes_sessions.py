"""``/v1/sessions``: sessions (agentkeep agents; session id = agent id).

A client-chosen ``sessionId`` makes ``POST /v1/sessions`` idempotent: the first request
creates the session (201); the same request again — a retry after a lost response — returns
that session (200). A request naming a taken id with a different ``agentId``, ``revisionId``
or ``metadata`` is a 409 (``session_exists``), never a silent success.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from agentkeep.agent_system.compaction import compact_now
from agentkeep.errors import AgentExistsError
from agentkeep.server.context import call, call_waiting, context
from agentkeep.server.errors import ApiError, json_response
from agentkeep.server.openapi import Operation, Param, path_id
from agentkeep.server.requests import json_body, query_bool, query_int, query_str
from agentkeep.server.wire import (
    CompactOut,
    CompactRequest,
    MessagesOut,
    SessionList,
    SessionOut,
    SettleRequest,
    StartSession,
    session_out,
)
from agentkeep.sessions import SessionRecord, Sessions

_ID = path_id("The session's id (an agent id).")


async def list_sessions(request: Request) -> Response:
    """GET /v1/sessions: sessions in id order."""
    agent_id = query_str(request, "agent_id")
    include_archived = query_bool(request, "include_archived")
    after = query_str(request, "after")
    limit = query_int(request, "limit", default=1000, low=1, high=1000)
    sessions = context(request).system.sessions
    records = await call(
        sessions.list,
        definition_id=agent_id,
        include_archived=include_archived,
        after=after,
        limit=limit,
    )
    next_after = records[-1].id if len(records) == limit else None
    return json_response(
        SessionList(sessions=[session_out(r) for r in records], next_after=next_after)
    )


def _same_start(existing: SessionRecord, start: StartSession) -> bool:
    """Whether ``existing`` is what ``start`` would have made (its metadata may have gained
    keys from features, not lost or changed the ones asked for)."""
    if existing.definition_id != start.agent_id:
        return False
    if start.revision_id is not None and existing.revision_id != start.revision_id:
        return False
    wanted = start.metadata or {}
    return all(k in existing.metadata and existing.metadata[k] == v for k, v in wanted.items())


def _start_or_find(sessions: Sessions, start: StartSession) -> tuple[SessionRecord, bool]:
    try:
        record = sessions.start(
            start.agent_id,
            revision_id=start.revision_id,
            id=start.session_id,
            metadata=start.metadata,
        )
    except AgentExistsError:
        if start.session_id is None:
            raise
        existing = sessions.get(start.session_id)
        if not _same_start(existing, start):
            raise ApiError(
                409,
                "session_exists",
                f'Session "{start.session_id}" already exists with a different agentId, '
                "revisionId or metadata; choose another sessionId.",
                {"session_id": start.session_id},
            ) from None
        return existing, False
    return record, True


async def start_session(request: Request) -> Response:
    """POST /v1/sessions: start a session pinned to a definition's revision."""
    start = await json_body(request, StartSession)
    record, created = await call(_start_or_find, context(request).system.sessions, start)
    if created:
        return json_response(session_out(record), 201, {"Location": f"/v1/sessions/{record.id}"})
    return json_response(session_out(record))


async def get_session(request: Request) -> Response:
    """GET /v1/sessions/{id}."""
    sessions = context(request).system.sessions
    return json_response(session_out(await call(sessions.get, request.path_params["id"])))


async def archive_session(request: Request) -> Response:
    """DELETE /v1/sessions/{id}: archive an idle session (409 while a live turn or owed work
    keeps it busy: the message names the route that gets out)."""
    sessions = context(request).system.sessions
    return json_response(session_out(await call(sessions.archive, request.path_params["id"])))


async def settle_session(request: Request) -> Response:
    """POST /v1/sessions/{id}/settle: end the work the session owes that no live turn holds
    (its ``owes``), answering the owed question with a note (409 while a live turn holds
    it: cancel that turn instead)."""
    ask = await json_body(request, SettleRequest, empty_ok=True)
    ctx = context(request)
    record = await call_waiting(
        ctx,
        ctx.system.sessions.settle,
        request.path_params["id"],
        note=ask.note,
        timeout_seconds=ctx.wait_seconds,
    )
    return json_response(session_out(record))


async def get_messages(request: Request) -> Response:
    """GET /v1/sessions/{id}/messages: the conversation view."""
    session_id = request.path_params["id"]
    messages = await call(context(request).system.transcript, session_id)
    return json_response(MessagesOut(session_id=session_id, messages=messages))


async def compact_session(request: Request) -> Response:
    """POST /v1/sessions/{id}/compact: ask for a compaction (202), or wait for it (200)."""
    session_id = request.path_params["id"]
    ask = await json_body(request, CompactRequest, empty_ok=True)
    ctx = context(request)
    if not ask.wait:
        await call(ctx.system.compact, session_id)
        return json_response(CompactOut(session_id=session_id, status="requested"), 202)
    try:
        done = await call(compact_now, ctx.system, session_id, timeout_seconds=ctx.wait_seconds)
    except TimeoutError:
        raise ApiError(
            504,
            "timeout",
            f"The compaction did not finish within {ctx.wait_seconds:g} s; it goes on.",
        ) from None
    return json_response(
        CompactOut(
            session_id=session_id,
            status="completed",
            context_tokens_before=done.context_tokens_before,
            messages=done.messages,
            state=done.state,
        )
    )


OPERATIONS = (
    Operation(
        method="GET",
        path="/v1/sessions",
        operation_id="listSessions",
        summary="List sessions (active ones, or all with include_archived).",
        handler=list_sessions,
        params=(
            Param(
                name="agent_id",
                where="query",
                schema={"type": "string"},
                description="Only sessions pinned to this definition.",
            ),
            Param(
                name="include_archived",
                where="query",
                schema={"type": "boolean"},
                description="Include archived sessions.",
            ),
            Param(
                name="after",
                where="query",
                schema={"type": "string"},
                description="The last id of the previous page (exclusive).",
            ),
            Param(
                name="limit",
                where="query",
                schema={"type": "integer", "minimum": 1, "maximum": 1000},
                description="At most this many (default 1000).",
            ),
        ),
        responses={200: SessionList},
    ),
    Operation(
        method="POST",
        path="/v1/sessions",
        operation_id="startSession",
        summary="Start a session; a client-chosen sessionId makes it idempotent.",
        handler=start_session,
        body=StartSession,
        responses={200: SessionOut, 201: SessionOut},
    ),
    Operation(
        method="GET",
        path="/v1/sessions/{id}",
        operation_id="getSession",
        summary="Read a session.",
        handler=get_session,
        params=(_ID,),
        responses={200: SessionOut},
    ),
    Operation(
        method="DELETE",
        path="/v1/sessions/{id}",
        operation_id="archiveSession",
        summary="Archive an idle session (it stays readable).",
        handler=archive_session,
        params=(_ID,),
        responses={200: SessionOut},
    ),
    Operation(
        method="POST",
        path="/v1/sessions/{id}/settle",
        operation_id="settleSession",
        summary="End the work the session owes that no live turn holds (a failed turn's "
        "question), answering it with a note; then it is idle and can be archived.",
        handler=settle_session,
        params=(_ID,),
        body=SettleRequest,
        body_required=False,
        responses={200: SessionOut},
    ),
    Operation(
        method="GET",
        path="/v1/sessions/{id}/messages",
        operation_id="getMessages",
        summary="The session's conversation as the model sees it.",
        handler=get_messages,
        params=(_ID,),
        responses={200: MessagesOut},
    ),
    Operation(
        method="POST",
        path="/v1/sessions/{id}/compact",
        operation_id="compactSession",
        summary="Compact the session's context (wait: true answers once it is done).",
        handler=compact_session,
        params=(_ID,),
        body=CompactRequest,
        body_required=False,
        responses={200: CompactOut, 202: CompactOut},
    ),
)
