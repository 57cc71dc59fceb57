"""Admin commands over one state directory: create, list, show, transcript, delete, resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import msgspec

from agentkeep.cli.config import load_agent_config
from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.history import render_history
from agentkeep.cli.options import timeout_option
from agentkeep.cli.output import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    CliError,
    all_fields,
    block_text,
    render_transcript,
    to_builtins,
)
from agentkeep.cli.reading import open_reader
from agentkeep.cli.runtime import open_system
from agentkeep.config import current_environment
from agentkeep.errors import UnknownAgentError
from agentkeep.history import read_history
from agentkeep.persistence.interface import Transaction
from agentkeep.server.wire import iso
from agentkeep.types import ConversationRecord, Settings, published_messages, rebuild_messages
from agentkeep.types.ids import ID_RULE


def parse_metadata(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` flags as a dict (values are strings)."""
    metadata: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(
                f"--metadata {pair!r} is not KEY=VALUE.",
                code="invalid_metadata",
                hint="Write it as --metadata team=research.",
                exit_code=EXIT_BAD_INPUT,
            )
        metadata[key] = value
    return metadata


@click.command()
@click.option("--id", "agent_id", help=f"The agent's id: {ID_RULE}.")
@click.option("--title", help="Sets metadata.title.")
@click.option("--metadata", "metadata", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@click.option("--parent", help="The id of the parent agent.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="A JSON agent config: {environment, features, metadata}.",
)
@click.option(
    "--with-environment", is_flag=True, help="Tell the agent about this machine (OS, cwd, shell)."
)
@pass_state
def create(
    state: CliState,
    agent_id: str | None,
    title: str | None,
    metadata: tuple[str, ...],
    parent: str | None,
    config_file: Path | None,
    with_environment: bool,
) -> None:
    """Create an agent (from flags or --config FILE.json) and print its id."""
    config = load_agent_config(config_file, title=title, metadata=parse_metadata(metadata))
    if with_environment and config.environment is None:
        config = msgspec.structs.replace(config, environment=current_environment())
    with open_system(state.home, resume=False, create=True) as (system, _):
        agent = system.create(config, id=agent_id, parent=parent)
    value = {
        "id": agent.id,
        "parent_id": parent,
        "metadata": config.metadata,
        "home": str(state.home.path),
    }
    state.output.result(value, lambda v: v["id"])


def _state_of(owes_work: bool) -> str:
    # Nothing runs between commands: an agent is either settled or owes work.
    return "owes_work" if owes_work else "idle"


@click.command(name="list")
@pass_state
def list_agents(state: CliState) -> None:
    """List every agent with its state."""

    def read(tx: Transaction) -> list[dict[str, Any]]:
        owing = set(tx.facts.agents_owing_work())
        return [
            {
                "id": row.id,
                "parent_id": row.parent_id,
                "metadata": row.metadata,
                "created_at": iso(row.created_at_ms),
                "state": _state_of(row.id in owing),
            }
            for row in tx.agents.live()
        ]

    with open_reader(state.home) as store:
        agents = store.read(read)

    def render(value: dict[str, Any]) -> str:
        if not value["agents"]:
            return "no agents (create one with `agentkeep create`)"
        lines = [f"{'ID':<26} {'STATE':<10} TITLE"]
        for each in value["agents"]:
            title = each["metadata"].get("title", "")
            lines.append(f"{each['id']:<26} {each['state']:<10} {title}")
        return "\n".join(lines)

    state.output.result({"agents": agents}, render)


def read_agent(tx: Transaction, agent_id: str) -> dict[str, Any] | None:
    """Everything ``show`` prints about one agent, from one snapshot."""
    row = tx.agents.get(agent_id)
    if row is None:
        return None
    settings = tx.facts.read_settings(agent_id)
    owed = tx.facts.read_owed(agent_id)
    records = tx.records.load(agent_id)
    queued = [
        {
            "id": q.id,
            "queue": q.queue,
            "seq": q.seq,
            "role": type(q.message).__name__.removesuffix("Message").lower(),
            "text": block_text(tuple(q.message.content)),
            "accepted_at": iso(q.accepted_at_ms),
        }
        for q in tx.queue.messages(agent_id)
    ]
    pending = [
        {
            "internal_id": p.internal_id,
            "index": p.index,
            "call_id": p.call.call_id,
            "name": p.call.name,
            "arguments": p.call.arguments,
            "committed": p.committed is not None,
        }
        for p in tx.calls.pending(agent_id)
    ]
    return {
        "id": row.id,
        "parent_id": row.parent_id,
        "created_at": iso(row.created_at_ms),
        "metadata": row.metadata,
        "config": row.config,
        "settings": None if settings is None else all_fields(settings),
        "state": _state_of(owed is not None),
        "owed": None if owed is None else all_fields(owed),
        "queued": queued,
        "notices": len(tx.queue.notices(agent_id)),
        "pending_calls": pending,
        "context_tokens": tx.facts.read_context_tokens(agent_id),
        "messages": len(rebuild_messages(records)),
        "children": tx.agents.children_of(agent_id),
    }


def _render_show(value: dict[str, Any]) -> str:
    settings = value["settings"] or {}
    where = f"{settings.get('provider') or '(default)'} / {settings.get('model') or '(default)'}"
    owed = value["owed"]
    lines = [
        f"agent      {value['id']}",
        f"title      {value['metadata'].get('title', '')}",
        f"parent     {value['parent_id'] or '-'}",
        f"state      {value['state']}" + (f" (stage: {owed['stage']})" if owed else ""),
        f"model      {where}",
        f"messages   {value['messages']}  (context tokens: {value['context_tokens'] or '-'})",
        f"queued     {len(value['queued'])}",
    ]
    lines += [f"  - [{q['queue']} #{q['seq']}] {q['text']}" for q in value["queued"]]
    lines.append(f"pending    {len(value['pending_calls'])} tool call(s)")
    lines += [f"  - #{p['index']} {p['name']}({p['arguments']})" for p in value["pending_calls"]]
    if value["metadata"]:
        lines.append(f"metadata   {json.dumps(value['metadata'], ensure_ascii=False)}")
    return "\n".join(lines)


@click.command()
@click.argument("agent_id")
@pass_state
def show(state: CliState, agent_id: str) -> None:
    """Show an agent: config, metadata, settings, state, queued work, pending calls."""
    with open_reader(state.home) as store:
        value = store.read(lambda tx: read_agent(tx, agent_id))
    if value is None:
        raise UnknownAgentError(agent_id)
    state.output.result(value, _render_show)


@click.command()
@click.argument("agent_id")
@click.option(
    "--all",
    "all_epochs",
    is_flag=True,
    help="Also the archived epochs a model switch or a compaction took out of view.",
)
@pass_state
def transcript(state: CliState, agent_id: str, all_epochs: bool) -> None:
    """Print an agent's durable conversation (with --all: its whole history, by epoch)."""
    with open_reader(state.home) as store:
        if all_epochs:
            epochs = store.read(lambda tx: read_history(tx, agent_id, Settings()))
            everything = {"id": agent_id, "epochs": [all_fields(epoch) for epoch in epochs]}
            state.output.result(everything, lambda _: render_history(epochs))
            return

        def read(tx: Transaction) -> list[ConversationRecord] | None:
            return None if tx.agents.get(agent_id) is None else tx.records.load(agent_id)

        records = store.read(read)
    if records is None:
        raise UnknownAgentError(agent_id)
    messages = published_messages(records)
    value = {"id": agent_id, "messages": to_builtins(messages)}
    state.output.result(value, lambda _: render_transcript(messages) or "(no messages yet)")


@click.command()
@click.argument("agent_id")
@pass_state
def delete(state: CliState, agent_id: str) -> None:
    """Delete an agent: release its id, keep what it wrote."""
    with open_system(state.home, resume=False) as (system, _):
        system.delete(agent_id)
    state.output.result({"id": agent_id, "deleted": True}, lambda v: f"deleted {v['id']}")


@click.command()
@timeout_option("Seconds to wait for the agents to settle.")
@pass_state
def resume(state: CliState, timeout_seconds: float) -> None:
    """Start every agent that owes work and wait until each has settled."""
    with open_system(state.home, resume=False) as (system, _):
        started = system.start()
        unsettled = [
            agent_id
            for agent_id in started
            if not system.wait_for_idle(agent_id, timeout_seconds=timeout_seconds)
        ]
        agents = [{"id": agent_id, "state": system.state(agent_id)} for agent_id in started]
    value = {"resumed": started, "agents": agents, "timed_out": unsettled}

    def render(v: dict[str, Any]) -> str:
        if not v["resumed"]:
            return "no agent owed work"
        lines = [f"resumed {len(v['resumed'])} agent(s):"]
        lines += [f"  {a['id']}  {a['state']}" for a in v["agents"]]
        return "\n".join(lines)

    state.output.result(value, render)
    if unsettled:
        raise CliError(
            f"{len(unsettled)} agent(s) still running after {timeout_seconds:g}s: "
            + ", ".join(unsettled),
            code="timeout",
            hint="Run `agentkeep resume` again with a larger --timeout.",
            exit_code=EXIT_FAILURE,
        )
