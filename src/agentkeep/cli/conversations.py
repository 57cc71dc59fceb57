"""``agentkeep session …``: the durable conversations. The wire's ``list/start/show/events/
send/cancel/archive``, and agentkeep's ``settle``, ``compact``, ``transcript`` and ``delete``.

Most run over a :class:`~agentkeep.mcp.backend.Backend` (:mod:`agentkeep.cli.transport`),
printing the daemon's JSON (``server.wire``) in both modes. A session id is an agent id
(docs/architecture.md): a session started from a definition and one made without (``session start``
without AGENT_ID) are the same kind of thing. The top-level names these commands had
(``agentkeep send`` …) exit 2 naming the command here (``agentkeep.cli.MOVED``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import msgspec

from agentkeep.cli.admin import (
    delete,
    parse_metadata,
    read_agent,
    render_runtime,
    start_bare,
    transcript,
)
from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.definitions import PAGE_LIMIT, wire
from agentkeep.cli.messaging import cancel, compact, send
from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.cli.reading import open_reader
from agentkeep.cli.session_report import render_html, report_data
from agentkeep.cli.store_reader import StoreReader
from agentkeep.cli.transport import open_backend
from agentkeep.errors import AgentExistsError
from agentkeep.server.event_wire import wire_event_data
from agentkeep.server.turn_wire import turn_out
from agentkeep.server.wire import EventList, SessionList, event_out, session_out
from agentkeep.sessions import SessionRecord
from agentkeep.types import SessionEvent
from agentkeep.types.ids import ID_RULE

EVENTS_PAGE = 100  # `session events` without --limit: the daemon's default page


def event_line(event: SessionEvent) -> str:
    """One event for people: sequence, type, turn, data (as the wire shows it, so both
    modes print the same)."""
    turn = f" [{event.turn_id}]" if event.turn_id else ""
    data = msgspec.json.encode(wire_event_data(event.type, event.data)).decode()
    return f"{event.sequence:>5}  {event.type}{turn}  {data}"


def _session_line(value: dict[str, Any]) -> str:
    agent = value["agentId"] or "(no definition)"
    line = f"{value['id']}  {agent}  {value['status']}"
    title = value["metadata"].get("title")
    if title:
        line += f"  {title}"
    owes = value.get("owes")
    if owes:
        line += f"  owes work: {owes['reason']} (`agentkeep session settle {value['id']}` ends it)"
    return line


@click.group(name="session")
def session() -> None:
    """Sessions: durable conversations, their turns and events (the `session`
    commands, and agentkeep's settle, compact, transcript and delete)."""


@session.command(name="list")
@click.option("--agent", "definition_id", help="Only the sessions of this agent definition.")
@click.option("--include-archived", is_flag=True, help="Show archived sessions too.")
@pass_state
def list_sessions(state: CliState, definition_id: str | None, include_archived: bool) -> None:
    """List sessions in id order (agents made without a definition too)."""
    with open_backend(state, read_only=True) as backend:
        records = backend.list_sessions(
            definition_id=definition_id,
            include_archived=include_archived,
            after=None,
            limit=PAGE_LIMIT,
        )
    next_after = records[-1].id if len(records) == PAGE_LIMIT else None
    value = wire(SessionList(sessions=[session_out(r) for r in records], next_after=next_after))
    state.output.result(
        value, lambda v: "\n".join(_session_line(s) for s in v["sessions"]) or "(no sessions)"
    )


@session.command(name="start")
@click.argument("definition_id", metavar="[AGENT_ID]", required=False)
@click.option(
    "--id",
    "session_id",
    help=f"The session's id ({ID_RULE}); with AGENT_ID a retry with it is a no-op, "
    "without it a taken id is refused.",
)
@click.option("--revision", "revision_id", help="Pin this revision instead of the current one.")
@click.option("--title", help="Sets metadata.title.")
@click.option("--metadata", "metadata", multiple=True, metavar="KEY=VALUE", help="Repeatable.")
@click.option("--parent", help="Without AGENT_ID: the id of the parent session.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Without AGENT_ID: a JSON agent config: {environment, features, metadata}.",
)
@click.option(
    "--with-environment",
    is_flag=True,
    help="Without AGENT_ID: tell the agent about this machine (OS, cwd, shell).",
)
@pass_state
def start(
    state: CliState,
    definition_id: str | None,
    session_id: str | None,
    revision_id: str | None,
    title: str | None,
    metadata: tuple[str, ...],
    parent: str | None,
    config_file: Path | None,
    with_environment: bool,
) -> None:
    """Start a session of agent definition AGENT_ID (pinned to its current revision), or,
    without AGENT_ID, one with no definition (from --config and the flags; it runs on the
    default model, and needs the store itself: refused while a daemon owns the home)."""
    wanted = parse_metadata(metadata)
    if definition_id is None:
        if revision_id is not None:
            raise click.BadParameter("--revision goes with AGENT_ID.", param_hint="--revision")
        bare = start_bare(
            state,
            agent_id=session_id,
            title=title,
            metadata=wanted,
            parent=parent,
            config_file=config_file,
            with_environment=with_environment,
        )
        state.output.result(wire(session_out(bare)), lambda v: v["id"])
        return
    for name, value in (
        ("--parent", parent),
        ("--config", config_file),
        ("--with-environment", with_environment or None),
    ):
        if value is not None:
            raise click.BadParameter(
                "it starts a session without a definition: leave out AGENT_ID (a "
                "definition's session takes its configuration from the definition).",
                param_hint=name,
            )
    if title is not None:
        wanted["title"] = title
    with open_backend(state) as backend:
        try:
            record = backend.start_session(
                definition_id,
                session_id=session_id,
                metadata=wanted or None,
                revision_id=revision_id,
            )
        except AgentExistsError:
            # A client-chosen id makes the start idempotent (the daemon's rule).
            assert session_id is not None
            record = backend.get_session(session_id)
            if not _same_start(record, definition_id, revision_id, wanted or None):
                raise CliError(
                    f'Session "{session_id}" already exists with a different agent, revision '
                    "or metadata.",
                    code="session_exists",
                    hint="Choose another --id.",
                    exit_code=EXIT_BAD_INPUT,
                ) from None
    state.output.result(wire(session_out(record)), lambda v: v["id"])


def _same_start(
    existing: SessionRecord,
    definition_id: str,
    revision_id: str | None,
    metadata: dict[str, Any] | None,
) -> bool:
    """A repeated start (the daemon's ``_same_start``): same definition, revision if given,
    and the asked-for metadata present."""
    if existing.definition_id != definition_id:
        return False
    if revision_id is not None and existing.revision_id != revision_id:
        return False
    return all(existing.metadata.get(k) == v for k, v in (metadata or {}).items())


@session.command(name="show")
@click.argument("session_id")
@pass_state
def show(state: CliState, session_id: str) -> None:
    """The session, its turns and its event ledger together (the first 1000 of each), and
    what the runtime holds for it (`runtime`: model settings, owed work, queued messages,
    pending tool calls; read from the store without its lock, in both modes)."""
    with open_backend(state, read_only=True) as backend:
        record = backend.get_session(session_id)
        turns = backend.turns(session_id, after=0, limit=PAGE_LIMIT)
        events = backend.events(session_id, after=0, limit=PAGE_LIMIT)
    with open_reader(state.home) as store:
        runtime = store.read(lambda tx: read_agent(tx, session_id))
    value = {
        "session": wire(session_out(record)),
        "turns": [wire(turn_out(t)) for t in turns],
        "events": [wire(event_out(e)) for e in events],
        "runtime": runtime,
    }

    def render(v: dict[str, Any]) -> str:
        lines = [_session_line(v["session"])]
        if v["runtime"] is not None:
            lines.append(render_runtime(v["runtime"]))
        lines += [f"  turn {t['number']} {t['id']}: {t['status']}" for t in v["turns"]]
        lines += [f"  {event_line(e)}" for e in events]
        return "\n".join(lines)

    state.output.result(value, render)


@session.command(name="events")
@click.argument("session_id")
@click.option("--after", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--limit", type=click.IntRange(1, 1000), default=EVENTS_PAGE, show_default=True)
@click.option(
    "--follow",
    is_flag=True,
    help="Keep printing events as they commit (the daemon's SSE stream; without a daemon "
    "the store is read without its lock, so it works while another process talks); "
    "Ctrl-C stops.",
)
@click.option(
    "--turn",
    "turn_id",
    help="With --follow: only this turn's events, ending after its last one.",
)
@pass_state
def events(
    state: CliState, session_id: str, after: int, limit: int, follow: bool, turn_id: str | None
) -> None:
    """The session's event ledger after sequence --after (one JSON line each with --follow)."""
    if turn_id is not None and not follow:
        raise click.BadParameter("--turn goes with --follow.", param_hint="--turn")
    with open_backend(state, read_only=True) as backend:
        if follow:
            try:
                for event in backend.follow(session_id, after=after, turn_id=turn_id):
                    if event is None:  # pragma: no cover - only with idle_seconds
                        continue
                    if state.json_mode:
                        state.output.event(wire(event_out(event)))
                    else:
                        click.echo(event_line(event))
            except KeyboardInterrupt:
                pass
            return
        page = backend.events(session_id, after=after, limit=limit)
    next_after = page[-1].sequence if len(page) == limit else None
    value = wire(EventList(events=[event_out(e) for e in page], next_after=next_after))
    state.output.result(
        value,
        lambda v: "\n".join(event_line(e) for e in page) or f"(no events after {after})",
    )


@session.command(name="settle")
@click.argument("session_id")
@click.option(
    "--note",
    help="What the note answering the owed question says (a default if omitted).",
)
@pass_state
def settle(state: CliState, session_id: str, note: str | None) -> None:
    """End the work a session owes that no live turn holds (`owes` in `session show`: a
    failed turn's question the runtime would still answer). A note answers the question,
    the session is idle and can be archived. Refused while a live turn holds the work
    (`session cancel` that turn)."""
    with open_backend(state) as backend:
        record = backend.settle_session(session_id, note=note)
    state.output.result(wire(session_out(record)), lambda v: f"{v['id']}: settled (owes nothing)")


@session.command(name="archive")
@click.argument("session_id")
@pass_state
def archive(state: CliState, session_id: str) -> None:
    """Archive a session (refused while a turn is live or work is owed: the refusal names
    the command that ends it); it stays readable."""
    with open_backend(state) as backend:
        record = backend.archive_session(session_id)
    state.output.result(wire(session_out(record)), lambda v: f"{v['id']}: {v['status']}")


for _command in (send, cancel, compact, transcript, delete):
    session.add_command(_command)


@session.command(name="export")
@click.argument("session_id")
@click.option(
    "--html",
    "fmt",
    flag_value="html",
    default=True,
    help="One self-contained HTML page (the default): opens without a server.",
)
@click.option("--json", "fmt", flag_value="json", help="The report's data as one JSON document.")
@click.option(
    "-o",
    "--output",
    "target",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write here (default: stdout).",
)
@pass_state
def export(state: CliState, session_id: str, fmt: str, target: Path | None) -> None:
    """A report of the whole conversation: messages, tool calls and results, each provider
    request rebuilt from the ledger (what it was sent, what came back, tokens), timings."""
    with open_backend(state, read_only=True) as backend:
        backend.get_session(session_id)  # exit 4 before reading the store
        with open_reader(state.home) as store:
            runtime = store.read(lambda tx: read_agent(tx, session_id))
            data = report_data(backend, session_id, runtime, StoreReader(store).get_revision)
    text = render_html(data) if fmt == "html" else json.dumps(data, indent=2, ensure_ascii=False)
    if target is None:
        click.echo(text, nl=False)
        return
    target.write_text(text, encoding="utf-8")
    state.output.result(
        {"path": str(target), "format": fmt, "events": len(data["events"])},
        lambda v: f"wrote {v['path']} ({v['events']} events)",
    )
