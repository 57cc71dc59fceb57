"""The rules a definition must keep, and turning caller input into checked structs.

Every refusal is an :class:`~agentkeep.registry.errors.InvalidDefinitionError` naming the field
by its wire path (``toolbox.toolIds[2]``, ``metadata.icon``), raised before anything is
written. The rules:

- ``id``: the id rule of docs/decisions.md, 1–128 of ``[a-z0-9._-]``; ``.``
  and ``..`` are refused as well, because an id is a path segment on the wire
  (``/v1/agents/{id}``) and those two would name a different route. It is the one id rule
  of :mod:`agentkeep.types.ids`, which session, agent and message ids follow too.
- ``driver.id``: the same rule (driver ids are machine identities too).
- Text fields and references have size limits (below); every reference (array entries,
  ``authRef``, ``model.id``, ``workspace.cwd``) is a non-empty string.
- ``metadata``, ``driver.config`` and ``model.settings`` are JSON objects: string keys, finite
  numbers (``NaN`` would silently become ``null``), integers within 64 bits, valid UTF-8 text,
  nesting at most :data:`MAX_JSON_DEPTH` deep, each at most :data:`MAX_JSON_OBJECT_BYTES`.
- The whole canonical definition is at most :data:`MAX_DEFINITION_BYTES`, so it always fits in
  one request body of the REST surface (512 KB).
- Unknown fields are refused (never silently dropped).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from agentkeep.registry.errors import InvalidDefinitionError
from agentkeep.types.ids import ID_RULE, is_valid_id

T = TypeVar("T")

MAX_NAME_CHARS = 256
MAX_DESCRIPTION_BYTES = 16 * 1024
MAX_INSTRUCTIONS_BYTES = 256 * 1024
MAX_REFERENCE_CHARS = 1024
MAX_CWD_CHARS = 4096
MAX_ARRAY_ITEMS = 1000
MAX_JSON_OBJECT_BYTES = 64 * 1024
MAX_JSON_DEPTH = 32
MAX_DEFINITION_BYTES = 384 * 1024

_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # what msgspec decodes from JSON as an int
_AT_PATH = re.compile(r"(?s)(.*) - at `\$\.?(.*)`")
_UNKNOWN = re.compile(r"Object contains unknown field `(.*)`")
_MISSING = re.compile(r"Object missing required field `(.*)`")


def check_id(value: str, field: str = "id") -> None:
    """The wire's id rule: 1–128 of ``[a-z0-9._-]``, and not ``.`` or ``..``."""
    if not is_valid_id(value):
        raise InvalidDefinitionError(field, f"{value!r} is not a valid id: use {ID_RULE}")


def check_text(value: str, field: str, *, max_bytes: int | None = None) -> None:
    """Valid UTF-8 (no lone surrogates) and, if given, at most ``max_bytes`` encoded."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidDefinitionError(field, "contains a lone surrogate (not UTF-8)") from None
    if max_bytes is not None and size > max_bytes:
        raise InvalidDefinitionError(field, f"is {size} bytes; the limit is {max_bytes}")


def check_reference(value: str, field: str, *, max_chars: int = MAX_REFERENCE_CHARS) -> None:
    """A non-empty string of at most ``max_chars`` characters."""
    if not value:
        raise InvalidDefinitionError(field, "must not be empty")
    if len(value) > max_chars:
        raise InvalidDefinitionError(field, f"is {len(value)} characters; the limit is {max_chars}")
    check_text(value, field)


def check_references(values: list[str], field: str) -> None:
    """An authoritative array of references (already de-duplicated)."""
    if len(values) > MAX_ARRAY_ITEMS:
        raise InvalidDefinitionError(
            field, f"has {len(values)} distinct entries; the limit is {MAX_ARRAY_ITEMS}"
        )
    for index, value in enumerate(values):
        check_reference(value, f"{field}[{index}]")


def check_json(value: Any, field: str, depth: int = 0) -> None:
    """``value`` is plain JSON that survives a round trip unchanged (see the module doc)."""
    if depth > MAX_JSON_DEPTH:
        raise InvalidDefinitionError(field, f"nests deeper than {MAX_JSON_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            raise InvalidDefinitionError(field, f"the integer {value} does not fit in 64 bits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidDefinitionError(field, f"{value} is not a JSON number")
    elif isinstance(value, str):
        check_text(value, field)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json(item, f"{field}[{index}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidDefinitionError(field, f"has a non-string key {key!r}")
            check_text(key, f"{field} key {key!r}")
            check_json(item, f"{field}.{key}" if field else key, depth + 1)
    else:
        raise InvalidDefinitionError(field, f"is not JSON (a {type(value).__name__})")


def check_json_object(value: dict[str, Any], field: str, encoded_size: int) -> None:
    """A JSON object field (``metadata``, ``driver.config``, ``model.settings``)."""
    check_json(value, field)
    if encoded_size > MAX_JSON_OBJECT_BYTES:
        raise InvalidDefinitionError(
            field, f"is {encoded_size} bytes as JSON; the limit is {MAX_JSON_OBJECT_BYTES}"
        )


def invalid_from(error: msgspec.ValidationError | msgspec.DecodeError) -> InvalidDefinitionError:
    """msgspec's message (``Expected `str`, got `int` - at `$.toolbox.toolIds[0]```) as an
    error naming the field."""
    text = str(error)
    match = _AT_PATH.fullmatch(text)
    problem, path = (match[1], match[2]) if match else (text, "")
    unknown = _UNKNOWN.fullmatch(problem)
    if unknown:
        name = f"{path}.{unknown[1]}" if path else unknown[1]
        return InvalidDefinitionError(name, "is not a field of a definition (unknown field)")
    missing = _MISSING.fullmatch(problem)
    if missing:
        name = f"{path}.{missing[1]}" if path else missing[1]
        return InvalidDefinitionError(name, "is required")
    if problem.endswith("got `null`"):
        return InvalidDefinitionError(
            path, "cannot be null (null clears only model, authRef and workspace.cwd)"
        )
    # ValidationError subclasses DecodeError: only a bare DecodeError is malformed JSON.
    if not isinstance(error, msgspec.ValidationError) and not path:
        return InvalidDefinitionError("", f"not valid JSON: {problem}")
    return InvalidDefinitionError(path, problem)


def checked(value: object, kind: type[T]) -> T:
    """``value`` (a ``kind`` struct, a mapping with wire names, or JSON text) as a ``kind``
    whose every field has its declared type.

    A struct built in Python is not type-checked by its constructor, so it goes through its
    builtin form and back; JSON text is decoded strictly (unknown fields refused).
    """
    try:
        if isinstance(value, bytes | bytearray | memoryview | str):
            return msgspec.json.decode(value, type=kind)
        if isinstance(value, (kind, Mapping)):
            raw = msgspec.to_builtins(value)
            check_json(raw, "")
            return msgspec.convert(raw, kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise invalid_from(exc) from None
    except TypeError as exc:  # to_builtins met a value that is not JSON
        raise InvalidDefinitionError("", f"is not JSON: {exc}") from None
    raise InvalidDefinitionError(
        "", f"expected a {kind.__name__}, a mapping or JSON text, got {type(value).__name__}"
    )
