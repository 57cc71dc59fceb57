"""``/v1/agents``: the wire's agents, which are the registry's definitions.

Every handler is a thin translation: parse the request, call ``system.registry`` in a worker
thread, encode the result. The registry judges every body itself (its errors name the field),
so the only refusal made here is malformed JSON (400).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from agentkeep.registry import DefinitionInput, DefinitionPatch
from agentkeep.server.context import call, context
from agentkeep.server.errors import json_response
from agentkeep.server.openapi import Operation, Param, path_id
from agentkeep.server.requests import check_json, query_bool, query_int, query_str, read_body
from agentkeep.server.wire import AgentList, AgentOut, agent_out

_INCLUDE_DELETED = Param(
    name="include_deleted",
    where="query",
    schema={"type": "boolean"},
    description="Include deleted definitions (tombstones).",
)
_AFTER = Param(
    name="after",
    where="query",
    schema={"type": "string"},
    description="The last id of the previous page (exclusive).",
)
_LIMIT = Param(
    name="limit",
    where="query",
    schema={"type": "integer", "minimum": 1, "maximum": 1000},
    description="At most this many (default 1000).",
)
_ID = path_id("The definition's id.")


async def list_agents(request: Request) -> Response:
    """GET /v1/agents: definitions in id order."""
    include_deleted = query_bool(request, "include_deleted")
    after = query_str(request, "after")
    limit = query_int(request, "limit", default=1000, low=1, high=1000)
    registry = context(request).system.registry
    records = await call(registry.list, include_deleted=include_deleted, after=after, limit=limit)
    next_after = records[-1].id if len(records) == limit else None
    return json_response(AgentList(agents=[agent_out(r) for r in records], next_after=next_after))


async def create_agent(request: Request) -> Response:
    """POST /v1/agents: a definition and its revision 1."""
    body = await read_body(request)
    check_json(body)
    record = await call(context(request).system.registry.create, body)
    return json_response(agent_out(record), 201, {"Location": f"/v1/agents/{record.id}"})


async def get_agent(request: Request) -> Response:
    """GET /v1/agents/{id}: the definition with its current revision."""
    include_deleted = query_bool(request, "include_deleted")
    registry = context(request).system.registry
    record = await call(registry.get, request.path_params["id"], include_deleted=include_deleted)
    return json_response(agent_out(record))


async def update_agent(request: Request) -> Response:
    """PATCH /v1/agents/{id}: docs/registry.md's PATCH rules; equal content keeps the revision."""
    body = await read_body(request)
    check_json(body)
    update = await call(context(request).system.registry.update, request.path_params["id"], body)
    return json_response(agent_out(update.record))


async def delete_agent(request: Request) -> Response:
    """DELETE /v1/agents/{id}: a tombstone; the id stays reserved."""
    record = await call(context(request).system.registry.delete, request.path_params["id"])
    return json_response(agent_out(record))


OPERATIONS = (
    Operation(
        method="GET",
        path="/v1/agents",
        operation_id="listAgents",
        summary="List definitions (live ones, or all with include_deleted).",
        handler=list_agents,
        params=(_INCLUDE_DELETED, _AFTER, _LIMIT),
        responses={200: AgentList},
    ),
    Operation(
        method="POST",
        path="/v1/agents",
        operation_id="createAgent",
        summary="Create a definition from a complete body (revision 1).",
        handler=create_agent,
        body=DefinitionInput,
        responses={201: AgentOut},
    ),
    Operation(
        method="GET",
        path="/v1/agents/{id}",
        operation_id="getAgent",
        summary="Read a definition's current revision.",
        handler=get_agent,
        params=(_ID, _INCLUDE_DELETED),
        responses={200: AgentOut},
    ),
    Operation(
        method="PATCH",
        path="/v1/agents/{id}",
        operation_id="updateAgent",
        summary="Merge a patch into a definition (a new revision if the content changed).",
        handler=update_agent,
        params=(_ID,),
        body=DefinitionPatch,
        responses={200: AgentOut},
    ),
    Operation(
        method="DELETE",
        path="/v1/agents/{id}",
        operation_id="deleteAgent",
        summary="Tombstone a definition; its revisions and sessions stay readable.",
        handler=delete_agent,
        params=(_ID,),
        responses={200: AgentOut},
    ),
)
