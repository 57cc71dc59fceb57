"""What the registry refuses, each error naming the definition, revision or field at fault.

All derive from :class:`agentkeep.errors.AgentkeepError` and carry a stable ``code`` (the REST
and MCP surfaces map codes to statuses: invalid → 422, exists → 409, unknown → 404).
"""

from __future__ import annotations

from agentkeep.errors import AgentkeepError


class RegistryError(AgentkeepError):
    """The registry of definitions could not do what was asked."""

    code = "registry_error"


class InvalidDefinitionError(RegistryError):
    """A definition, an input or a patch breaks a rule; ``field`` names where (wire names,
    e.g. ``toolbox.toolIds[2]``), and nothing was written."""

    code = "invalid_definition"

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


class DefinitionExistsError(RegistryError):
    """The id is taken: by a live definition, or by a deleted one (ids stay reserved)."""

    code = "definition_exists"

    def __init__(self, definition_id: str, *, deleted: bool) -> None:
        if deleted:
            message = (
                f'Definition "{definition_id}" was deleted, and the ids of deleted definitions '
                "stay reserved so their revisions and sessions stay unambiguous; choose "
                "another id."
            )
        else:
            message = f'Definition "{definition_id}" already exists; update it instead.'
        super().__init__(message)
        self.definition_id = definition_id
        self.deleted = deleted


class UnknownDefinitionError(RegistryError):
    """No definition has this id."""

    code = "unknown_definition"

    def __init__(self, definition_id: str, message: str | None = None) -> None:
        super().__init__(message or f'Definition "{definition_id}" does not exist.')
        self.definition_id = definition_id


class DefinitionDeletedError(UnknownDefinitionError):
    """The definition was deleted: it can be read (``include_deleted``) but not changed."""

    code = "definition_deleted"

    def __init__(self, definition_id: str) -> None:
        super().__init__(
            definition_id,
            f'Definition "{definition_id}" was deleted; its revisions stay readable, but it '
            "cannot be updated.",
        )


class UnknownRevisionError(RegistryError):
    """No revision matches the revision id, or the (definition id, number) pair."""

    code = "unknown_revision"

    def __init__(self, what: str) -> None:
        super().__init__(f"No revision {what}.")
        self.what = what
