"""The registry of versioned definitions: the wire's agents, with immutable revisions.

The wire calls a definition an *agent*; in agentkeep an agent is a conversation (a
*session*, docs/architecture.md), so the
definition is a :class:`Definition` (see ``docs/registry.md`` for the mapping):

- :mod:`~agentkeep.registry.types`: the values (the wire's camelCase JSON names);
- :mod:`~agentkeep.registry.validation`: the rules and limits, errors naming the field;
- :mod:`~agentkeep.registry.canonical`: normalization and the content hash;
- :mod:`~agentkeep.registry.patch`: the PATCH rules of docs/registry.md;
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
