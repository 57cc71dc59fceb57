"""The route table and ``/v1/openapi.json``, generated from it and the msgspec types.

Each route is declared once as an :class:`Operation` (method, path, handler, parameters, body
type, response types); the Starlette routes and the OpenAPI document are both made from the
same table, so the document cannot drift from what is served. The schemas come from
``msgspec.json.schema_components`` over the very structs the routes decode and encode.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from agentkeep.server.wire import ErrorEnvelope
from agentkeep.types.ids import ID_PATTERN, ID_RULE, MAX_ID_CHARS

Handler = Callable[[Request], Awaitable[Response]]
_REF = "#/components/schemas/{name}"
#: The media type of a route that streams server-sent events.
EVENT_STREAM = "text/event-stream"


@dataclass(frozen=True, kw_only=True)
class Param:
    """One path, query or header parameter of an operation."""

    name: str
    where: Literal["path", "query", "header"]
    schema: dict[str, Any]
    description: str
    required: bool = False


@dataclass(frozen=True, kw_only=True)
class Operation:
    """One route: what it serves and how it is documented.

    Attributes:
        method: The HTTP method.
        path: The path in OpenAPI (and Starlette) form: ``/v1/agents/{id}``.
        operation_id: A stable name (for generated clients).
        summary: One line for people.
        handler: The Starlette endpoint.
        params: Its parameters.
        body: The msgspec type of its JSON body, or None.
        body_required: Whether the body must be sent (False: an absent body is ``{}``).
        responses: Each success status and its body type (None: no body; a string: a
            media type whose body is text, such as :data:`EVENT_STREAM`, an SSE stream).
        auth: Whether the token is required (every ``/v1`` route).
    """

    method: str
    path: str
    operation_id: str
    summary: str
    handler: Handler
    params: tuple[Param, ...] = ()
    body: Any = None
    body_required: bool = True
    responses: dict[int, Any] = field(default_factory=dict)
    auth: bool = True


#: The schema of an id (a path parameter or a body field): the id rule of docs/decisions.md.
ID_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": ID_PATTERN,
    "minLength": 1,
    "maxLength": MAX_ID_CHARS,
}


def path_id(description: str, name: str = "id") -> Param:
    """An id path parameter (``{id}``), its schema stating the id rule."""
    return Param(
        name=name,
        where="path",
        schema=dict(ID_SCHEMA),
        description=f"{description} An id: {ID_RULE}.",
        required=True,
    )


def document(operations: Sequence[Operation], *, version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations``."""
    types: list[Any] = [ErrorEnvelope]
    for op in operations:
        if op.body is not None:
            types.append(op.body)
        types += [t for t in op.responses.values() if t is not None and not isinstance(t, str)]
    schemas, components = msgspec.json.schema_components(types, ref_template=_REF)
    schema_of = {id(kind): schema for kind, schema in zip(types, schemas, strict=True)}
    paths: dict[str, dict[str, Any]] = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, schema_of)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentkeep daemon",
            "version": version,
            "description": "Seed 002's REST API over an agentkeep state directory "
            "(docs/daemon.md).",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "runtimeToken": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "x-amalgm-runtime-token",
                },
            },
        },
    }


def _operation(op: Operation, schema_of: dict[int, Any]) -> dict[str, Any]:
    error = {"application/json": {"schema": schema_of[id(ErrorEnvelope)]}}
    responses: dict[str, Any] = {}
    for status, kind in op.responses.items():
        entry: dict[str, Any] = {"description": f"{status}"}
        if isinstance(kind, str):  # a media type: text (an SSE stream, metrics)
            entry["content"] = {kind: {"schema": {"type": "string"}}}
        elif kind is not None:
            entry["content"] = {"application/json": {"schema": schema_of[id(kind)]}}
        responses[str(status)] = entry
    responses["default"] = {"description": "An error (docs/daemon.md)", "content": error}
    spec: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "parameters": [
            {
                "name": p.name,
                "in": p.where,
                "required": p.required,
                "schema": p.schema,
                "description": p.description,
            }
            for p in op.params
        ],
        "responses": responses,
        "security": [{"bearer": []}, {"runtimeToken": []}] if op.auth else [],
    }
    if op.body is not None:
        spec["requestBody"] = {
            "required": op.body_required,
            "content": {"application/json": {"schema": schema_of[id(op.body)]}},
        }
    return spec
