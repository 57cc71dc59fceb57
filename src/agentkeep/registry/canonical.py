"""Normalization and the canonical content hash of a definition.

Revisions (docs/registry.md, "The rules"): the normalized complete
definition is hashed, and an edit whose hash equals the current revision's keeps that revision.
Here:

- *complete*: every field present, defaults filled in (:class:`~.types.Definition` has no
  optional field; a create fills ``name`` with the id);
- *normalized*: the definition's own arrays (``resources.files/skills/subagents``,
  ``toolbox.toolIds/actionIds``) de-duplicated keeping each entry's first occurrence (rules:
  "arrays are authoritative and de-duplicated"); their order is the caller's and is kept;
- *canonical JSON*: msgspec's sorted encoder: every object's keys sorted (struct fields by
  wire name, and JSON objects at every depth), no whitespace, UTF-8, shortest round-trip
  floats;
- *hash*: sha256 of the canonical JSON, as 64 lowercase hex digits.

Arrays *inside* the opaque JSON objects (``metadata``, ``driver.config``, ``model.settings``)
are data the registry does not interpret: their order and duplicates are kept.

Invariants (property-tested): normalizing is idempotent; the hash does not depend on key order
or duplicate array entries; a normalized definition's stored JSON is exactly its canonical
JSON, and decoding it gives the definition back.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import msgspec

from agentkeep.registry.errors import InvalidDefinitionError
from agentkeep.registry.types import Definition
from agentkeep.registry.validation import (
    MAX_CWD_CHARS,
    MAX_DEFINITION_BYTES,
    MAX_DESCRIPTION_BYTES,
    MAX_INSTRUCTIONS_BYTES,
    MAX_NAME_CHARS,
    check_id,
    check_json_object,
    check_reference,
    check_references,
    check_text,
    checked,
)

_ENCODER = msgspec.json.Encoder(order="sorted")
_DECODER = msgspec.json.Decoder(Definition)


class Canonical(NamedTuple):
    """A normalized definition with its canonical JSON and content hash."""

    definition: Definition
    json: bytes
    hash: str


def canonicalize(definition: Definition) -> Canonical:
    """Check, normalize and hash ``definition``.

    Raises:
        InvalidDefinitionError: a rule of :mod:`agentkeep.registry.validation` is broken.
    """
    typed = checked(definition, Definition)
    resources, toolbox = typed.resources, typed.toolbox
    deduplicated = msgspec.structs.replace(
        typed,
        resources=msgspec.structs.replace(
            resources,
            files=_first_occurrences(resources.files),
            skills=_first_occurrences(resources.skills),
            subagents=_first_occurrences(resources.subagents),
        ),
        toolbox=msgspec.structs.replace(
            toolbox,
            tool_ids=_first_occurrences(toolbox.tool_ids),
            action_ids=_first_occurrences(toolbox.action_ids),
        ),
    )
    _check_rules(deduplicated)
    text = _ENCODER.encode(deduplicated)
    if len(text) > MAX_DEFINITION_BYTES:
        raise InvalidDefinitionError(
            "", f"the definition is {len(text)} bytes as JSON; the limit is {MAX_DEFINITION_BYTES}"
        )
    # Decoding the canonical text makes the returned value exactly what is stored: JSON
    # objects in sorted key order, fresh containers shared with nobody.
    return Canonical(_DECODER.decode(text), text, hash_of(text))


def normalize(definition: Definition) -> Definition:
    """The normalized form of ``definition`` (see the module docstring)."""
    return canonicalize(definition).definition


def content_hash(definition: Definition) -> str:
    """sha256 hex of the canonical JSON of ``definition`` normalized."""
    return canonicalize(definition).hash


def canonical_json(definition: Definition) -> bytes:
    """The canonical JSON of ``definition`` normalized."""
    return canonicalize(definition).json


def hash_of(canonical: bytes) -> str:
    """sha256 hex of canonical JSON bytes."""
    return hashlib.sha256(canonical).hexdigest()


def decode_definition(canonical: bytes | str) -> Definition:
    """A stored definition back (it was stored canonical, so it is normalized)."""
    return _DECODER.decode(canonical)


def _first_occurrences(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


def _check_rules(definition: Definition) -> None:
    check_id(definition.id)
    check_reference(definition.name, "name", max_chars=MAX_NAME_CHARS)
    check_text(definition.description, "description", max_bytes=MAX_DESCRIPTION_BYTES)
    check_text(definition.instructions, "instructions", max_bytes=MAX_INSTRUCTIONS_BYTES)
    check_id(definition.driver.id, "driver.id")
    _check_object(definition.driver.config, "driver.config")
    if definition.model is not None:
        check_reference(definition.model.id, "model.id")
        _check_object(definition.model.settings, "model.settings")
    if definition.auth_ref is not None:
        check_reference(definition.auth_ref, "authRef")
    check_references(definition.resources.files, "resources.files")
    check_references(definition.resources.skills, "resources.skills")
    check_references(definition.resources.subagents, "resources.subagents")
    check_references(definition.toolbox.tool_ids, "toolbox.toolIds")
    check_references(definition.toolbox.action_ids, "toolbox.actionIds")
    if definition.workspace.cwd is not None:
        check_reference(definition.workspace.cwd, "workspace.cwd", max_chars=MAX_CWD_CHARS)
    _check_object(definition.metadata, "metadata")


def _check_object(value: dict[str, object], field: str) -> None:
    try:
        size = len(_ENCODER.encode(value))
    except (TypeError, UnicodeEncodeError, OverflowError):
        size = 0  # check_json names exactly what is wrong
    check_json_object(value, field, size)
