"""``agentkeep agent …``: definitions (``list/show/create/update/delete``).

A definition is read from a JSON file or ``-`` (stdin). Every subcommand runs over a
:class:`~agentkeep.mcp.backend.Backend` (:mod:`agentkeep.cli.transport`), so it goes through
the daemon when one owns the home, and prints the daemon's JSON (``server.wire``) either way.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click
import msgspec

from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.cli.transport import open_backend
from agentkeep.registry import DefinitionRecord
from agentkeep.server.wire import AgentList, AgentOut, agent_out
from agentkeep.types import JSONObject

PAGE_LIMIT = 1000  # the most one page holds (the wire's page limit)


def wire(value: msgspec.Struct) -> Any:
    """A wire struct as plain JSON values (what ``--json`` prints)."""
    return msgspec.to_builtins(value)


def read_json_object(source: str, what: str) -> JSONObject:
    """A JSON object from the file ``source`` or stdin (``-``); exit 2 naming what is wrong."""
    try:
        # Bytes, decoded strictly: a text stdin would let undecodable bytes through as lone
        # surrogates (Python's UTF-8 mode), to fail later and differently in each mode.
        if source == "-":
            text = sys.stdin.buffer.read().decode("utf-8")
        else:
            with open(source, "rb") as handle:
                text = handle.read().decode("utf-8")
    except OSError as error:
        raise CliError(
            f"Cannot read the {what} from {source}: {error.strerror}.",
            code="unreadable_input",
            exit_code=EXIT_BAD_INPUT,
        ) from None
    except UnicodeDecodeError:
        raise CliError(
            f"The {what} in {source} is not UTF-8 text.",
            code="invalid_json",
            hint="Convert it to UTF-8, e.g. with iconv.",
            exit_code=EXIT_BAD_INPUT,
        ) from None
    try:
        value = json.loads(text)
    except ValueError as error:
        raise CliError(
            f"The {what} in {source} is not JSON: {error}.",
            code="invalid_json",
            exit_code=EXIT_BAD_INPUT,
        ) from None
    if not isinstance(value, dict):
        raise CliError(
            f"The {what} in {source} must be a JSON object, not {type(value).__name__}.",
            code="invalid_json",
            exit_code=EXIT_BAD_INPUT,
        )
    return value


def _line(value: dict[str, Any]) -> str:
    deleted = " (deleted)" if value["deletedAt"] else ""
    return f"{value['id']}  revision {value['currentRevision']}{deleted}"


def _show(state: CliState, record: DefinitionRecord) -> None:
    state.output.result(wire(agent_out(record)), _render_one)


def _render_one(value: dict[str, Any]) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


@click.group(name="agent")
def agent() -> None:
    """Agent definitions: named, revisioned, JSON."""


@agent.command(name="list")
@click.option("--include-deleted", is_flag=True, help="Show deleted definitions too.")
@pass_state
def list_definitions(state: CliState, include_deleted: bool) -> None:
    """List the definitions in id order."""
    with open_backend(state, read_only=True) as backend:
        records = backend.list_definitions(
            include_deleted=include_deleted, after=None, limit=PAGE_LIMIT
        )
    next_after = records[-1].id if len(records) == PAGE_LIMIT else None
    value = wire(AgentList(agents=[agent_out(r) for r in records], next_after=next_after))
    state.output.result(
        value, lambda v: "\n".join(_line(a) for a in v["agents"]) or "(no agent definitions)"
    )


@agent.command(name="show")
@click.argument("definition_id")
@click.option("--include-deleted", is_flag=True, help="Show a deleted definition.")
@pass_state
def show_definition(state: CliState, definition_id: str, include_deleted: bool) -> None:
    """Show a definition and its current revision."""
    with open_backend(state, read_only=True) as backend:
        record = backend.get_definition(definition_id, include_deleted=include_deleted)
    _show(state, record)


@agent.command(name="create")
@click.argument("source", metavar="DEFINITION.json")
@pass_state
def create_definition(state: CliState, source: str) -> None:
    """Create a definition from a JSON file (or - for stdin); its id must be unused."""
    definition = read_json_object(source, "definition")
    with open_backend(state, create=True) as backend:
        record = backend.create_definition(definition)
    _show(state, record)


@agent.command(name="update")
@click.argument("definition_id")
@click.argument("source", metavar="PATCH.json")
@pass_state
def update_definition(state: CliState, definition_id: str, source: str) -> None:
    """Apply a JSON patch (the nested PATCH rules of docs/registry.md) from a file or - (stdin)."""
    patch = read_json_object(source, "patch")
    with open_backend(state) as backend:
        update = backend.update_definition(definition_id, patch)
    _show(state, update.record)


@agent.command(name="delete")
@click.argument("definition_id")
@pass_state
def delete_definition(state: CliState, definition_id: str) -> None:
    """Delete (tombstone) a definition; its id stays reserved, its sessions stay."""
    with open_backend(state) as backend:
        record = backend.delete_definition(definition_id)
    _show(state, record)


__all__ = ["AgentOut", "agent", "read_json_object", "wire"]
