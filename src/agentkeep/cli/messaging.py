"""The commands that put work into a session or take it out: ``session send`` (with
``--steer``), ``session cancel`` and ``session compact``; and the form of ``talk AGENT_ID``
this process runs itself (:mod:`agentkeep.cli.talking` decides when).

The message is TEXT, ``-`` (read from stdin) or ``--file PATH``, so a long message can be
sent (argv stops near 128 KB; a message is at most ``max_input_bytes``, 512 KiB). Each
command is one code path over the command's :class:`~agentkeep.mcp.backend.Backend`
(:mod:`agentkeep.cli.transport`: the daemon's REST API, or this process's system), so it
prints the same in both modes. ``session send --wait`` waits through
:mod:`agentkeep.cli.turn_waiting`: a failed turn exits 5, Ctrl-C cancels the turn and exits
130, and ``--timeout`` bounds the whole wait. ``talk AGENT_ID`` without a daemon streams token
by token through :mod:`agentkeep.cli.turns`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from agentkeep.agent_system import AgentSystem
from agentkeep.cli.config import load_providers, message_options
from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.definitions import wire
from agentkeep.cli.message_input import message_json_option, message_of, read_message
from agentkeep.cli.options import timeout_option
from agentkeep.cli.output import EXIT_FAILURE, CliError, Console, answer_text
from agentkeep.cli.runtime import StreamPrinter, open_system
from agentkeep.cli.transport import open_backend, runs_on_after_exit
from agentkeep.cli.turn_waiting import finish
from agentkeep.cli.turns import (
    EXIT_INTERRUPTED,
    Interrupts,
    RetryReporter,
    announce,
    wait_for_turn,
)
from agentkeep.delivery import Delivery
from agentkeep.errors import UnknownAgentError
from agentkeep.messages import user
from agentkeep.server.turn_wire import turn_out
from agentkeep.sessions import UnknownSessionError
from agentkeep.types import MessageOptions
from agentkeep.types.ids import ID_RULE
from agentkeep.types.records import QueueName

F = TypeVar("F", bound=Callable[..., Any])


def message_flags(function: F) -> F:
    for option in reversed(
        [
            click.argument("text", required=False),
            click.option(
                "--file",
                "file_path",
                type=click.Path(path_type=Path, dir_okay=False),
                help="Read the message from this file (UTF-8) instead of TEXT.",
            ),
            click.option(
                "--model",
                help="The model for this message (and after it); the agent's provider stays.",
            ),
            click.option(
                "--provider",
                help="The provider id (see providers.toml); without --model, its default model.",
            ),
            click.option(
                "--id",
                "message_id",
                help=f"A message id for idempotent delivery ({ID_RULE}): resending it is a no-op.",
            ),
            timeout_option("Seconds to wait for the answer, retries included."),
        ]
    ):
        function = option(function)
    return function


def _result(system: AgentSystem, agent_id: str, delivery: Delivery, waited: bool) -> dict[str, Any]:
    answer = answer_text(system.transcript(agent_id)) if waited else None
    return {
        "agent_id": agent_id,
        "id": delivery.id,
        "delivery": delivery.delivery,
        "created": delivery.created,
        "waited": waited,
        "state": system.state(agent_id),
        "answer": answer,
    }


def _prepare(
    state: CliState,
    text: str | None,
    file_path: Path | None,
    provider: str | None,
    model: str | None,
) -> tuple[str, MessageOptions]:
    """Everything checked before anything is written: the message, the store, the options."""
    message = read_message(text, file_path)
    state.home.require_store()
    return message, message_options(load_providers(state.home.path), provider, model)


def _run_and_wait(
    state: CliState,
    queue: QueueName,
    agent_id: str,
    message: str,
    options: MessageOptions,
    *,
    message_id: str | None,
    timeout_seconds: float,
    printer: StreamPrinter | None = None,
) -> dict[str, Any]:
    """Deliver, run the agent and wait for its turn (Ctrl-C aborts it, see ``turns``)."""
    reporter = RetryReporter(agent_id, json_mode=state.json_mode)
    features = [reporter] if printer is None else [printer, reporter]
    with (
        Interrupts().installed() as interrupts,
        open_system(state.home, resume=False, features=features, observer=printer) as (
            system,
            _,
        ),
    ):
        if interrupts.interrupted:  # Ctrl-C before anything was sent: send nothing
            announce("nothing was sent", json_mode=state.json_mode)
            interrupts.announced = True
            raise click.exceptions.Exit(EXIT_INTERRUPTED)
        delivery = system.internals.accept(
            agent_id, queue, user(message), id=message_id, options=options
        )
        wait_for_turn(system, agent_id, timeout_seconds, interrupts, json_mode=state.json_mode)
        return _result(system, agent_id, delivery, waited=True)


def talk_to_agent_id(
    state: CliState,
    agent_id: str,
    text: str | None,
    file_path: Path | None,
    *,
    model: str | None,
    provider: str | None,
    message_id: str | None,
    timeout_seconds: float,
) -> None:
    """Today's ``talk AGENT_ID``, run by this process: the answer streams as the model writes
    it (text deltas, tool calls as they run). A failed turn exits 5; Ctrl-C aborts the turn
    and exits 130. With --json, one JSON object per line (text_delta, tool_call,
    tool_started, tool_finished, response_done) and a final {"event": "done", ...}.
    """
    message, options = _prepare(state, text, file_path, provider, model)
    printer = StreamPrinter(agent_id, Console(), json_lines=state.json_mode)
    value = _run_and_wait(
        state,
        "send",
        agent_id,
        message,
        options,
        message_id=message_id,
        timeout_seconds=timeout_seconds,
        printer=printer,
    )
    if state.json_mode:
        state.output.event({"event": "done", **value})


_WAIT_HELP = (
    "Wait for the turn's end, streaming its answer: a failed turn exits 5, Ctrl-C cancels "
    "the turn (exit 130)."
)


@click.command(name="send")
@click.argument("session_id")
@message_flags
@click.option("--key", "idempotency_key", help="An idempotency key: a retry is a no-op.")
@message_json_option
@click.option("--steer", is_flag=True, help="Join the running turn instead of queueing a new one.")
@click.option("--wait", is_flag=True, help=_WAIT_HELP)
@pass_state
def send(
    state: CliState,
    session_id: str,
    text: str | None,
    file_path: Path | None,
    model: str | None,
    provider: str | None,
    message_id: str | None,
    timeout_seconds: float,
    idempotency_key: str | None,
    message_json: bool,
    steer: bool,
    wait: bool,
) -> None:
    """Send a message as a turn of the session (durable on return); --steer joins the
    running turn at its next stop instead of queueing a new one.

    The message is TEXT, - (read from stdin) or --file PATH.

    Without --wait the accepted turn is printed and the command returns: a daemon runs it
    at once, directly it waits for `agentkeep resume` (said on stderr). With --wait the
    answer streams as it arrives; a failed turn exits 5, Ctrl-C cancels it (exit 130).
    """
    message = message_of(read_message(text, file_path), message_json)
    options = None
    if provider is not None or model is not None:
        state.home.require_store()
        options = message_options(load_providers(state.home.path), provider, model)
    reporter = RetryReporter(session_id, json_mode=state.json_mode)
    with open_backend(
        state, run_sends=wait, cancel_timeout_seconds=timeout_seconds, features=[reporter]
    ) as backend:
        sent = backend.send(
            session_id,
            message,
            delivery="steer" if steer else "send",
            idempotency_key=idempotency_key,
            metadata=None,
            message_id=message_id,
            options=options,
        )
        finish(
            state,
            backend,
            sent,
            wait=wait,
            stream=not state.json_mode,
            timeout_seconds=timeout_seconds,
        )
        if not wait and not runs_on_after_exit(backend) and not state.json_mode:
            click.echo(
                "note: nothing runs it until `agentkeep resume` (or send with --wait)", err=True
            )


@click.command(name="cancel")
@click.argument("session_id")
@click.option("--turn", "turn_id", help="The turn to cancel (default: the active one).")
@timeout_option(
    "Seconds to wait for a running turn to stop (directly; a daemon bounds its own).",
    default=30.0,
)
@pass_state
def cancel(state: CliState, session_id: str, turn_id: str | None, timeout_seconds: float) -> None:
    """Cancel the session's active turn (the running one, else the queued one; or --turn);
    prints it once it stopped. Turns queued behind it stay. Nothing live to cancel exits 1
    (naming `session settle` when the session owes work no turn holds)."""
    with open_backend(state, cancel_timeout_seconds=timeout_seconds) as backend:
        turn = backend.cancel_turn(session_id, turn_id)
    state.output.result(wire(turn_out(turn)), lambda v: f"turn {v['id']}: {v['status']}")


@click.command(name="compact")
@click.argument("session_id")
@timeout_option()
@pass_state
def compact(state: CliState, session_id: str, timeout_seconds: float) -> None:
    """Compact the session's history now and wait for it (through a daemon: its wait bound)."""
    agent_id = session_id
    with open_backend(state) as backend:
        try:
            done = backend.compact(agent_id, timeout_seconds=timeout_seconds)
        except UnknownAgentError:  # directly, the system names the agent
            raise UnknownSessionError(session_id) from None
        except TimeoutError:
            raise CliError(
                f'The compaction of session "{agent_id}" did not finish within the wait; it '
                "goes on.",
                code="timeout",
                hint="Look at it later with `agentkeep session show`, or pass a larger --timeout.",
                exit_code=EXIT_FAILURE,
            ) from None
    value = {
        "agent_id": agent_id,
        "compacted": True,
        "context_tokens_before": done.context_tokens_before,
        "messages": done.messages,
        "state": done.state,
    }
    state.output.result(
        value, lambda v: f"compacted {v['agent_id']}: {v['messages']} message(s) left"
    )
