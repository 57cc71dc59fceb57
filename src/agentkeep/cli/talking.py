"""``agentkeep talk``: ``talk AGENT MESSAGE`` (docs/cli.md) and ``talk AGENT_ID``.

One command, two meanings of its first argument, decided in this order:

1. ``--session S``: continue session ``S`` (it must be a session of the definition AGENT).
2. AGENT names an agent definition: start a session of it and talk. With
   ``--key K`` the session's id is derived from AGENT and K (MCP's ``talk_to_agent`` rule),
   so a retry finds the session and the turn the first attempt made: the same key returns
   them without running the model again, and with another message is refused (exit 2).
3. AGENT names a session (an agent id, docs/architecture.md, "Words"): continue it.

Cases 1 and 2, and every case while a daemon owns the home, run over a
:class:`~agentkeep.mcp.backend.Backend`: the message becomes a turn; ``--background`` prints
the accepted turn and returns; otherwise the answer streams as its blocks commit and the
command ends with the turn (``completed`` 0, ``failed`` 5, ``cancelled`` 1). Case 3 without
a daemon and without ``--key``/``--background`` talks directly (the answer streams token by
token, ``--model``/``--provider`` apply, ``--json`` prints JSON lines).
"""

from __future__ import annotations

from pathlib import Path

import click

from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.message_input import message_json_option, message_of, read_message
from agentkeep.cli.messaging import message_flags, talk_to_agent_id
from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.cli.reading import open_reader
from agentkeep.cli.transport import daemon_of, open_backend
from agentkeep.cli.turn_waiting import send_turn
from agentkeep.errors import UnknownAgentError
from agentkeep.mcp.backend import Backend
from agentkeep.mcp.tools import start_for_talk
from agentkeep.registry import UnknownDefinitionError
from agentkeep.registry.tables import read_current
from agentkeep.sessions import SessionRecord


def _names_definition(state: CliState, name: str) -> bool:
    """Directly (no daemon): does ``name`` name a definition? Read without the lock."""
    if not state.home.path.is_dir():
        return False
    state.home.require_store()
    with open_reader(state.home) as reader:
        return reader.read(lambda tx: read_current(tx, name)) is not None


def _session_for(
    backend: Backend, agent: str, session_id: str | None, key: str | None
) -> SessionRecord:
    """The session to talk in (module docstring's order); a new one for a definition, or
    with ``key`` the one a first talk with that key started (MCP's ``talk_to_agent`` rule)."""
    if session_id is not None:
        session = backend.get_session(session_id)
        if session.definition_id != agent and session.id != agent:
            raise CliError(
                f'Session "{session.id}" is not a session of agent "{agent}" (it belongs to '
                f"{session.definition_id or 'no definition'}).",
                code="session_mismatch",
                hint=f"Run `agentkeep talk {session.definition_id or session.id} … --session "
                f"{session.id}`, or leave out --session to start a new session.",
                exit_code=EXIT_BAD_INPUT,
            )
        return session
    try:
        backend.get_definition(agent, include_deleted=False)
    except UnknownDefinitionError as missing:
        try:
            return backend.get_session(agent)
        except UnknownAgentError:
            raise missing from None
    return start_for_talk(backend, agent, key, None)[0]


@click.command()
@click.argument("agent")
@message_flags
@click.option("--session", "session_id", help="Continue this session of AGENT.")
@click.option(
    "--key",
    "idempotency_key",
    help="An idempotency key: the same key (with or without --session) returns the same "
    "session and turn without running it again; with another message it is refused.",
)
@message_json_option
@click.option(
    "--background", is_flag=True, help="Print the accepted turn and return without waiting."
)
@pass_state
def talk(
    state: CliState,
    agent: str,
    text: str | None,
    file_path: Path | None,
    model: str | None,
    provider: str | None,
    message_id: str | None,
    timeout_seconds: float,
    session_id: str | None,
    idempotency_key: str | None,
    message_json: bool,
    background: bool,
) -> None:
    """Talk to AGENT (a definition: a new session unless --session; or a session id).

    The message is TEXT, - (read from stdin) or --file PATH. The answer streams as it
    arrives (a progress line on stderr after 5 s without one); --timeout bounds the wait
    (exit 1); a failed turn exits 5 with the failure on stderr; Ctrl-C cancels the turn and
    exits 130. The session id is printed on stderr (`session: ID`) to continue it with
    --session; --json prints one JSON object (turn, duplicate, answer).
    """
    seed_form = session_id is not None or idempotency_key is not None or background or message_json
    if not seed_form and daemon_of(state) is None and not _names_definition(state, agent):
        talk_to_agent_id(
            state,
            agent,
            text,
            file_path,
            model=model,
            provider=provider,
            message_id=message_id,
            timeout_seconds=timeout_seconds,
        )
        return
    if model is not None or provider is not None or message_id is not None:
        raise CliError(
            "--model, --provider and --id apply to talking to an agent id without a daemon; "
            "a definition's sessions use its model, and --key is the turn's idempotency key.",
            code="invalid_option",
            exit_code=EXIT_BAD_INPUT,
        )
    message = message_of(read_message(text, file_path), message_json)
    with open_backend(state) as backend:
        session = _session_for(backend, agent, session_id, idempotency_key)
        if not state.json_mode:
            click.echo(f"session: {session.id}", err=True)
        send_turn(
            state,
            backend,
            session.id,
            message,
            delivery="send",
            idempotency_key=idempotency_key,
            wait=not background,
            timeout_seconds=timeout_seconds,
        )
