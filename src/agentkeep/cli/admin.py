"""What ``agentkeep session …`` adds to the REST API's session commands, over one state directory:
a session without a definition (``session start`` without AGENT_ID), what the runtime holds
for a session (``session show``'s ``runtime``), ``session transcript``, ``session delete``;
and the top-level ``resume``.

A bare start and ``session delete`` have no REST operation: they need the store itself
and are refused (exit 3) while a daemon owns the home.
"""

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
from agentkeep.cli.transport import refuse_under_daemon
from agentkeep.config import current_environment
from agentkeep.errors import UnknownAgentError
from agentkeep.history import read_history
from agentkeep.persistence.interface import Transaction
from agentkeep.server.wire import iso
from agentkeep.sessions import SessionRecord, UnknownSessionError
from agentkeep.types import Settings
from agentkeep.types.records import ConversationRecord, published_messages, rebuild_messages


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


def start_bare(
    state: CliState,
    *,
    agent_id: str | None,
    title: str | None,
    metadata: dict[str, Any],
    parent: str | None,
    config_file: Path | None,
    with_environment: bool,
) -> SessionRecord:
    """``session start`` without AGENT_ID: a session (an agent) with no definition, from
    ``--config FILE.json`` and the flags; needs the store itself (created if missing)."""
    refuse_under_daemon(state, "session start", "without AGENT_ID")
    config = load_agent_config(config_file, title=title, metadata=metadata)
    if with_environment and config.environment is None:
        config = msgspec.structs.replace(config, environment=current_environment())
    with open_system(state.home, resume=False, create=True) as (system, _):
        agent = system.create(config, id=agent_id, parent=parent)
        return system.sessions.get(agent.id)


def _state_of(owes_work: bool) -> str:
    # Nothing runs between commands: an agent is either settled or owes work.
    return "owes_work" if owes_work else "idle"


def read_agent(tx: Transaction, agent_id: str) -> dict[str, Any] | None:
    """What the runtime holds for one session (agent), from one snapshot: ``session show``'s
    ``runtime`` (settings, owed work, queued messages, pending tool calls, …)."""
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


def render_runtime(value: dict[str, Any]) -> str:
    """``read_agent``'s value for people (``session show`` in text mode)."""
    settings = value["settings"] or {}
    where = f"{settings.get('provider') or '(default)'} / {settings.get('model') or '(default)'}"
    owed = value["owed"]
    lines = [
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


@click.command(name="transcript")
@click.argument("session_id")
@click.option(
    "--all",
    "all_epochs",
    is_flag=True,
    help="Also the archived epochs a model switch or a compaction took out of view.",
)
@pass_state
def transcript(state: CliState, session_id: str, all_epochs: bool) -> None:
    """Print a session's durable conversation (with --all: its whole history, by epoch).

    Read without the store's lock: it works while another process owns the home."""
    agent_id = session_id
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
        raise UnknownSessionError(session_id)
    messages = published_messages(records)
    value = {"id": agent_id, "messages": to_builtins(messages)}
    state.output.result(value, lambda _: render_transcript(messages) or "(no messages yet)")


@click.command(name="delete")
@click.argument("session_id")
@pass_state
def delete(state: CliState, session_id: str) -> None:
    """Delete a session: release its id, keep what it wrote (`session archive` keeps the id).

    Needs the store itself: refused (exit 3) while a daemon owns the home."""
    refuse_under_daemon(state, "session delete")
    agent_id = session_id
    with open_system(state.home, resume=False) as (system, _):
        try:
            system.delete(agent_id)
        except UnknownAgentError:
            raise UnknownSessionError(session_id) from None
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
