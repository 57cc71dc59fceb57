"""Reading a request: query parameters and JSON bodies, each refusal naming what was wrong.

Malformed JSON is a **400** (``malformed_json``); JSON of the wrong shape is a **422**
(``invalid_request``, ``details.field`` the JSON path); a query parameter that does not parse
is a **422** (``invalid_query``, ``details.field`` its name). A body is read at most
:data:`~agentkeep.server.security.MAX_BODY_BYTES` long, counted while it streams in (**413**),
so a body without a ``Content-Length`` cannot get past the limit either.

JSON nested deeper than :data:`MAX_JSON_DEPTH` arrays and objects is a **400**
(``json_too_deep``), refused before anything walks it: a deep value would otherwise exhaust
the interpreter's recursion limit in the decoder or in whatever recurses over it later.
"""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec
from starlette.requests import Request

from agentkeep.server.errors import ApiError
from agentkeep.server.security import MAX_BODY_BYTES

T = TypeVar("T")

#: The deepest nesting of arrays and objects a JSON body may have.
MAX_JSON_DEPTH = 100

_AT_PATH = re.compile(r"(?s)(.*) - at `\$\.?(.*)`")
_TRUE = ("true", "1")
_FALSE = ("false", "0")


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The whole body, or 413 as soon as it grows past ``limit``."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(
                413,
                "payload_too_large",
                f"The body is over the limit of {limit} bytes.",
                {"limit": limit},
            )
        chunks.append(chunk)
    return b"".join(chunks)


async def json_body(request: Request, kind: type[T], *, empty_ok: bool = False) -> T:
    """The body decoded as ``kind`` (``empty_ok``: an empty body is ``{}``)."""
    body = await read_body(request)
    if not body.strip() and empty_ok:
        body = b"{}"
    return decode(body, kind)


def decode(body: bytes, kind: type[T]) -> T:
    """``body`` as ``kind``: 400 if it is not JSON (or nests too deep), 422 naming the field
    if the shape is wrong."""
    check_depth(body)
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as error:
        # A typed decode stops at the first wrong type; malformed JSON after it is still a 400.
        check_json(body)
        raise invalid_request(error) from None
    except msgspec.DecodeError as error:
        raise ApiError(400, "malformed_json", f"The body is not valid JSON: {error}") from None


def check_json(body: bytes) -> None:
    """400 unless ``body`` is well-formed JSON (the library then judges its shape)."""
    check_depth(body)
    try:
        msgspec.json.decode(body)
    except msgspec.DecodeError as error:
        raise ApiError(400, "malformed_json", f"The body is not valid JSON: {error}") from None


def check_depth(body: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """400 ``json_too_deep`` if ``body`` nests arrays and objects deeper than ``limit``.

    Free for nearly every body: no more brackets than ``limit`` means no deeper nesting.
    Otherwise the brackets are counted outside strings, in one pass (no recursion).
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return
    if _depth(body) > limit:
        raise ApiError(
            400,
            "json_too_deep",
            f"The body nests arrays and objects deeper than {limit} levels.",
            {"limit": limit},
        )


_STRUCTURE = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _depth(body: bytes) -> int:
    depth = deepest = 0
    for match in _STRUCTURE.finditer(body):
        token = match[0]
        if token in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest


def invalid_request(error: msgspec.ValidationError) -> ApiError:
    """msgspec's message (``Expected `str`, got `int` - at `$.agentId```) as a 422 naming
    the field."""
    match = _AT_PATH.fullmatch(str(error))
    problem, path = (match[1], match[2]) if match else (str(error), "")
    message = f"{path}: {problem}" if path else problem
    return ApiError(422, "invalid_request", message, {"field": path})


def ascii_header(request: Request, name: str) -> str | None:
    """A header's value, or None when absent; 400 ``invalid_header`` unless it is ASCII.

    HTTP carries header values as bytes (Starlette reads them as Latin-1), so a non-ASCII
    value would silently differ from the same text sent as UTF-8 JSON (an ``Idempotency-Key``
    header and the same body key would name two turns). One rule: header values we read as
    text are printable ASCII; anything else goes in the body.
    """
    value = request.headers.get(name)
    if value is None:
        return None
    if not value.isascii() or not value.isprintable():
        raise ApiError(
            400,
            "invalid_header",
            f"The {name} header must be printable ASCII; send other text in the JSON body.",
            {"field": name},
        )
    return value


def _one(request: Request, name: str) -> str | None:
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise ApiError(422, "invalid_query", f"{name} is given more than once.", {"field": name})
    return values[0] if values else None


def query_bool(request: Request, name: str) -> bool:
    """A boolean query parameter (``true``/``false``, ``1``/``0``); absent is false."""
    value = _one(request, name)
    if value is None:
        return False
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ApiError(
        422, "invalid_query", f"{name} must be true or false, got {value!r}.", {"field": name}
    )


def query_int(request: Request, name: str, *, default: int, low: int, high: int) -> int:
    """An integer query parameter within ``low..high``."""
    value = _one(request, name)
    if value is None:
        return default
    try:
        number = int(value) if value.strip().lstrip("-").isdigit() else None
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise ApiError(
            422,
            "invalid_query",
            f"{name} must be an integer from {low} to {high}, got {value!r}.",
            {"field": name},
        )
    return number


def query_str(request: Request, name: str) -> str | None:
    """A text query parameter, or None when absent."""
    return _one(request, name)
