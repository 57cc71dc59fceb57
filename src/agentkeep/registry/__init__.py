"""The registry of versioned definitions: seed 002's agents, with immutable revisions.

Seed 002 (``../shared/seeds/002_*``, DEFINITIONS.md, DATA_MODEL.md, ARCHITECTURE.md) calls a
definition an *agent*; in agentkeep an agent is a conversation (seed 002's *session*), so the
definition is a :class:`Definition` (see ``docs/registry.md`` for the mapping):

- :mod:`~agentkeep.registry.types`: the values (seed 002's camelCase JSON names);
- :mod:`~agentkeep.registry.validation`: the rules and limits, errors naming the field;
- :mod:`~agentkeep.registry.canonical`: normalization and the content hash;
- :mod:`~agentkeep.registry.patch`: seed 002's PATCH rules;
- :mod:`~agentkeep.registry.tables`: the two tables, inside a store transaction;
- :mod:`~agentkeep.registry.service`: :class:`Registry`, the operations
  (``AgentSystem.registry``).
"""

from agentkeep.registry.canonical import content_hash
from agentkeep.registry.errors import (
    DefinitionDeletedError,
    DefinitionExistsError,
    InvalidDefinitionError,
    RegistryError,
    UnknownDefinitionError,
    UnknownRevisionError,
)
from agentkeep.registry.service import Registry
from agentkeep.registry.types import (
    DEFAULT_DRIVER_ID,
    Definition,
    DefinitionInput,
    DefinitionPatch,
    DefinitionRecord,
    DefinitionUpdate,
    DriverPatch,
    DriverRef,
    ModelInput,
    ModelRef,
    Resources,
    ResourcesPatch,
    Revision,
    Toolbox,
    ToolboxPatch,
    Workspace,
    WorkspacePatch,
)

__all__ = [
    "DEFAULT_DRIVER_ID",
    "Definition",
    "DefinitionDeletedError",
    "DefinitionExistsError",
    "DefinitionInput",
    "DefinitionPatch",
    "DefinitionRecord",
    "DefinitionUpdate",
    "DriverPatch",
    "DriverRef",
    "InvalidDefinitionError",
    "ModelInput",
    "ModelRef",
    "Registry",
    "RegistryError",
    "Resources",
    "ResourcesPatch",
    "Revision",
    "Toolbox",
    "ToolboxPatch",
    "UnknownDefinitionError",
    "UnknownRevisionError",
    "Workspace",
    "WorkspacePatch",
    "content_hash",
]
