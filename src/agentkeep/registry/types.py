"""The registry's values: the wire's agent definition and its revisions, as msgspec structs.

The wire calls a definition an *agent*; agentkeep calls it a
:class:`Definition` because an agentkeep agent is a conversation (a *session*; see
``docs/registry.md``). The JSON field names are the wire's exactly (``authRef``,
``toolbox.toolIds``, …: ``rename="camel"``), so a client of the wire reads and writes them
unchanged. Timestamps are integers in milliseconds (``createdAtMs``); the wire surfaces format
them.

Three shapes of one definition:

- :class:`Definition` is complete and normalized: every field present (defaults filled in),
  arrays de-duplicated. Only the registry makes them; its canonical JSON is what is hashed.
- :class:`DefinitionInput` (create) and :class:`DefinitionPatch` (update) are partial: a field
  left :data:`msgspec.UNSET` is *absent*, which is different from ``None`` (JSON ``null``),
  which clears a nullable field. Unknown fields are refused when decoding.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import UNSET, UnsetType

from agentkeep.registry.validation import (
    MAX_ARRAY_ITEMS,
    MAX_CWD_CHARS,
    MAX_DESCRIPTION_BYTES,
    MAX_INSTRUCTIONS_BYTES,
    MAX_JSON_DEPTH,
    MAX_JSON_OBJECT_BYTES,
    MAX_NAME_CHARS,
    MAX_REFERENCE_CHARS,
)
from agentkeep.types import JSONObject
from agentkeep.types.ids import IdString

#: The driver a definition uses when it names none: agentkeep's own durable loop.
DEFAULT_DRIVER_ID = "agentkeep"


# The input shapes' text fields as ``/v1/openapi.json`` states them (the document is
# as strict as the server). :mod:`.validation` checks each rule, so its error names the field
# in the registry's words; the schema only states it.
Name = Annotated[
    str,
    msgspec.Meta(
        description=f"1-{MAX_NAME_CHARS} characters.",
        extra_json_schema={"minLength": 1, "maxLength": MAX_NAME_CHARS},
    ),
]
Description = Annotated[
    str,
    msgspec.Meta(
        description=f"At most {MAX_DESCRIPTION_BYTES} bytes as UTF-8.",
        extra_json_schema={"maxLength": MAX_DESCRIPTION_BYTES},
    ),
]
Instructions = Annotated[
    str,
    msgspec.Meta(
        description=f"At most {MAX_INSTRUCTIONS_BYTES} bytes as UTF-8.",
        extra_json_schema={"maxLength": MAX_INSTRUCTIONS_BYTES},
    ),
]
Reference = Annotated[
    str,
    msgspec.Meta(
        description=f"A reference: 1-{MAX_REFERENCE_CHARS} characters.",
        extra_json_schema={"minLength": 1, "maxLength": MAX_REFERENCE_CHARS},
    ),
]
Cwd = Annotated[
    str,
    msgspec.Meta(
        description=f"A directory: 1-{MAX_CWD_CHARS} characters.",
        extra_json_schema={"minLength": 1, "maxLength": MAX_CWD_CHARS},
    ),
]
#: A caller's JSON object (``metadata``, ``driver.config``, ``model.settings``): its rules are
#: beyond what JSON Schema states of an open object, so the description states them.
CallerJson = Annotated[
    JSONObject,
    msgspec.Meta(
        description=f"Any JSON object: at most {MAX_JSON_OBJECT_BYTES} bytes as JSON, "
        f"{MAX_JSON_DEPTH} levels deep, integers within 64 bits."
    ),
]
#: An authoritative array of references: at most ``MAX_ARRAY_ITEMS`` distinct entries (a
#: duplicate does not count, so no ``maxItems`` can state it: the description does).
References = Annotated[
    list[Reference],
    msgspec.Meta(
        description=f"At most {MAX_ARRAY_ITEMS} distinct references; duplicates are dropped."
    ),
]


class _Wire(msgspec.Struct, frozen=True, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """The wire's camelCase names; unknown fields are an error, never silently dropped."""


class _Partial(_Wire, frozen=True, kw_only=True, omit_defaults=True):
    """An absent (``UNSET``) field is left out when encoded, so absent stays absent."""


# -- the complete definition -------------------------------------------------------------------
class DriverRef(_Wire, frozen=True, kw_only=True):
    """Which driver runs the definition's sessions, and its non-secret configuration."""

    id: str = DEFAULT_DRIVER_ID
    config: JSONObject = {}


class ModelRef(_Wire, frozen=True, kw_only=True):
    """The model (``provider/model``) and its settings (effort, …)."""

    id: str
    settings: JSONObject = {}


class Resources(_Wire, frozen=True, kw_only=True):
    """References the host resolves: files, skills, subagents (opaque ids)."""

    files: list[str] = []
    skills: list[str] = []
    subagents: list[str] = []


class Toolbox(_Wire, frozen=True, kw_only=True):
    """The tools and actions a session of this definition may use (opaque ids)."""

    tool_ids: list[str] = []
    action_ids: list[str] = []


class Workspace(_Wire, frozen=True, kw_only=True):
    """Where the definition's sessions work; ``cwd`` None: the host decides."""

    cwd: str | None = None


class Definition(_Wire, frozen=True, kw_only=True):
    """A complete, normalized definition (the wire's ``AgentDefinition``).

    Attributes:
        id: The stable identity: 1–128 of ``[a-z0-9._-]``; never changes.
        name: A display name; defaults to the id.
        description: What it is for.
        instructions: The system prompt of its sessions.
        driver: The driver (default ``agentkeep``, the native loop) and its config.
        model: The model and its settings, or None (the system's default).
        auth_ref: The name of a credential the host resolves (never a secret), or None.
        resources: Files, skills and subagents it refers to.
        toolbox: Tool and action ids its sessions may use.
        workspace: Its working directory.
        metadata: Caller-owned JSON.
    """

    id: IdString
    name: str
    description: str = ""
    instructions: str = ""
    driver: DriverRef = msgspec.field(default_factory=DriverRef)
    model: ModelRef | None = None
    auth_ref: str | None = None
    resources: Resources = msgspec.field(default_factory=Resources)
    toolbox: Toolbox = msgspec.field(default_factory=Toolbox)
    workspace: Workspace = msgspec.field(default_factory=Workspace)
    metadata: JSONObject = {}


# -- partial shapes: create and PATCH ----------------------------------------------------------
class DriverPatch(_Partial, frozen=True, kw_only=True):
    """Merged by field into the current driver (``config`` as a whole replaces)."""

    id: IdString | UnsetType = UNSET
    config: CallerJson | UnsetType = UNSET


class ModelInput(_Partial, frozen=True, kw_only=True):
    """A model replaces the previous one whole (it is a top-level field); ``settings`` absent
    means ``{}``."""

    id: Reference
    settings: CallerJson | UnsetType = UNSET


class ResourcesPatch(_Partial, frozen=True, kw_only=True):
    """Merged by field; a given array replaces the old one (arrays are authoritative)."""

    files: References | UnsetType = UNSET
    skills: References | UnsetType = UNSET
    subagents: References | UnsetType = UNSET


class ToolboxPatch(_Partial, frozen=True, kw_only=True):
    """Merged by field; a given array replaces the old one (arrays are authoritative)."""

    tool_ids: References | UnsetType = UNSET
    action_ids: References | UnsetType = UNSET


class WorkspacePatch(_Partial, frozen=True, kw_only=True):
    """Merged by field; ``cwd=None`` clears it."""

    cwd: Cwd | UnsetType | None = UNSET


class DefinitionPatch(_Partial, frozen=True, kw_only=True):
    """An update (the wire's ``AgentPatch``): absent fields keep their value.

    ``driver``, ``resources``, ``toolbox`` and ``workspace`` merge by field; every other field
    replaces. ``None`` clears the nullable fields (``model``, ``auth_ref``, ``workspace.cwd``).
    ``driver`` may be a string: the driver id, with an empty config. ``id`` may be given only
    if it equals the definition's id (a GET–edit–PATCH round trip); it never changes.
    """

    id: IdString | UnsetType = UNSET
    name: Name | UnsetType = UNSET
    description: Description | UnsetType = UNSET
    instructions: Instructions | UnsetType = UNSET
    driver: IdString | DriverPatch | UnsetType = UNSET
    model: ModelInput | UnsetType | None = UNSET
    auth_ref: Reference | UnsetType | None = UNSET
    resources: ResourcesPatch | UnsetType = UNSET
    toolbox: ToolboxPatch | UnsetType = UNSET
    workspace: WorkspacePatch | UnsetType = UNSET
    metadata: CallerJson | UnsetType = UNSET


class DefinitionInput(DefinitionPatch, frozen=True, kw_only=True):
    """A create (the wire's ``AgentDefinitionInput``): the id, and any other fields; what is
    absent takes its default (a create is a patch over the defaults)."""

    id: IdString


# -- what the registry stores and returns ------------------------------------------------------
class Revision(_Wire, frozen=True, kw_only=True):
    """One immutable version of a definition (the wire's ``AgentRevision``).

    Attributes:
        id: The revision's own id (see ``model.ids``), unique across definitions.
        definition_id: The definition it belongs to (on the wire ``agentId``).
        number: 1, 2, 3, … per definition, dense, never reused.
        hash: sha256 hex of the definition's canonical JSON.
        definition: The complete normalized definition.
        created_at_ms: When it was made.
    """

    id: str
    definition_id: str = msgspec.field(name="agentId")
    number: int
    hash: str
    definition: Definition
    created_at_ms: int


class DefinitionRecord(_Wire, frozen=True, kw_only=True):
    """A definition's identity and its current revision (the wire's ``AgentRecord``).

    Attributes:
        id: The definition id.
        current_revision_id: The id of the current revision.
        current_revision: The current revision's number.
        hash: The current revision's content hash.
        definition: The current revision's definition.
        created_at_ms: When the definition was created.
        updated_at_ms: When its current revision was made (or it was deleted).
        deleted_at_ms: When it was deleted, or None while it is live.
    """

    id: str
    current_revision_id: str
    current_revision: int
    hash: str
    definition: Definition
    created_at_ms: int
    updated_at_ms: int
    deleted_at_ms: int | None = None

    @property
    def deleted(self) -> bool:
        """True once the definition was deleted (a tombstone)."""
        return self.deleted_at_ms is not None


class DefinitionUpdate(msgspec.Struct, frozen=True, kw_only=True):
    """What an update did.

    Attributes:
        record: The definition after the update.
        revision: Its current revision (the new one if ``changed``).
        changed: False if the patched content equalled the current revision's, in which case
            nothing was written.
    """

    record: DefinitionRecord
    revision: Revision
    changed: bool
