"""Commands that talk to an agent: send, steer, abort, compact (and today's form of talk,
which :mod:`agentkeep.cli.talking` runs).

The message is TEXT, ``-`` (read from stdin) or ``--file PATH``, so a message of any size can
be sent (argv stops near 128 KB). ``send --wait`` and ``talk`` wait through
:mod:`agentkeep.cli.turns`: a failed turn exits 5, Ctrl-C aborts the turn and exits 130, and
``--timeout`` bounds the whole wait.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from agentkeep.agent_system import AgentSystem
from agentkeep.cli import legacy_client
from agentkeep.cli.admin import DEFAULT_TIMEOUT_SECONDS
from agentkeep.cli.config import load_providers, message_options
from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.message_input import read_message
from agentkeep.cli.options import check_seconds
from agentkeep.cli.output import EXIT_FAILURE, CliError, Console, answer_text
from agentkeep.cli.runtime import StreamPrinter, open_store, open_system
from agentkeep.cli.transport import daemon_of
from agentkeep.cli.turns import (
    EXIT_INTERRUPTED,
    Interrupts,
    RetryReporter,
    announce,
    wait_for_turn,
)
from agentkeep.delivery import Delivery, user
from agentkeep.errors import UnknownAgentError
from agentkeep.model import MessageOptions, QueueName

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
                help="A message id for idempotent delivery: resending it is a no-op.",
            ),
            click.option(
                "--timeout",
                "timeout_seconds",
                type=float,
                callback=check_seconds,
                default=DEFAULT_TIMEOUT_SECONDS,
                show_default=True,
                help="Seconds to wait for the answer, retries included.",
            ),
        ]
    ):
        function = option(function)
    return function


def _wait(system: AgentSystem, agent_id: str, timeout_seconds: float) -> None:
    if not system.wait_for_idle(agent_id, timeout_seconds=timeout_seconds):
        raise CliError(
            f'Agent "{agent_id}" was still working after {timeout_seconds:g}s.',
            code="timeout",
            hint="Its work is durable: run `agentkeep resume` to let it finish.",
            exit_code=EXIT_FAILURE,
        )


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
        delivery = system.deliver(agent_id, queue, user(message), id=message_id, options=options)
        wait_for_turn(system, agent_id, timeout_seconds, interrupts, json_mode=state.json_mode)
        return _result(system, agent_id, delivery, waited=True)


def _deliver(
    state: CliState,
    queue: QueueName,
    agent_id: str,
    text: str | None,
    file_path: Path | None,
    *,
    model: str | None,
    provider: str | None,
    message_id: str | None,
    wait: bool,
    timeout_seconds: float,
) -> None:
    if daemon_of(state) is not None:
        legacy_client.refuse_options(model, provider)
        value = legacy_client.deliver(
            state,
            "steer" if queue == "steering" else "send",
            agent_id,
            read_message(text, file_path),
            message_id=message_id,
            wait=wait,
            timeout_seconds=timeout_seconds,
        )
        state.output.result(value, _render_delivery)
        return
    message, options = _prepare(state, text, file_path, provider, model)
    if not wait:
        # Durable enqueue only: the agent runs it on `agentkeep resume` (or any later
        # command that runs it); nothing else in the store starts.
        with open_system(state.home, resume=False) as (system, _):
            delivery = system.deliver(
                agent_id, queue, user(message), id=message_id, options=options, start=False
            )
            owes = system.state(agent_id) != "idle"
        value = {
            "agent_id": agent_id,
            "id": delivery.id,
            "delivery": delivery.delivery,
            "created": delivery.created,
            "waited": False,
            "state": "owes_work" if owes else "idle",
            "answer": None,
        }
    else:
        value = _run_and_wait(
            state,
            queue,
            agent_id,
            message,
            options,
            message_id=message_id,
            timeout_seconds=timeout_seconds,
        )
    state.output.result(value, _render_delivery)


def _render_delivery(v: dict[str, Any]) -> str:
    if v["waited"]:
        return v["answer"] or f"(no answer; the agent is {v['state']})"
    verb = "queued" if v["created"] else "already queued"
    if v["state"] == "running":  # a daemon runs it now
        return f"{verb} message {v['id']} for {v['agent_id']} ({v['delivery']}); it is running"
    return (
        f"{verb} message {v['id']} for {v['agent_id']} ({v['delivery']}); "
        "run `agentkeep resume` to let it answer, or pass --wait"
    )


_WAIT_HELP = (
    "Run the agent and wait for its answer: a failed turn exits 5, Ctrl-C aborts the turn "
    "(exit 130)."
)


@click.command()
@click.argument("agent_id")
@message_flags
@click.option("--wait", is_flag=True, help=_WAIT_HELP)
@pass_state
def send(
    state: CliState,
    agent_id: str,
    text: str | None,
    file_path: Path | None,
    model: str | None,
    provider: str | None,
    message_id: str | None,
    timeout_seconds: float,
    wait: bool,
) -> None:
    """Queue a user message (durable on return); --wait runs the agent and prints the answer.

    The message is TEXT, - (read from stdin) or --file PATH.
    """
    _deliver(
        state,
        "send",
        agent_id,
        text,
        file_path,
        model=model,
        provider=provider,
        message_id=message_id,
        wait=wait,
        timeout_seconds=timeout_seconds,
    )


@click.command()
@click.argument("agent_id")
@message_flags
@click.option("--wait", is_flag=True, help=_WAIT_HELP)
@pass_state
def steer(
    state: CliState,
    agent_id: str,
    text: str | None,
    file_path: Path | None,
    model: str | None,
    provider: str | None,
    message_id: str | None,
    timeout_seconds: float,
    wait: bool,
) -> None:
    """Queue a steering message: it joins the current turn at its next stop.

    The message is TEXT, - (read from stdin) or --file PATH.
    """
    _deliver(
        state,
        "steering",
        agent_id,
        text,
        file_path,
        model=model,
        provider=provider,
        message_id=message_id,
        wait=wait,
        timeout_seconds=timeout_seconds,
    )


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


@click.command()
@click.argument("agent_id")
@click.option(
    "--timeout",
    "timeout_seconds",
    type=float,
    callback=check_seconds,
    default=30.0,
    show_default=True,
    help="Seconds.",
)
@pass_state
def abort(state: CliState, agent_id: str, timeout_seconds: float) -> None:
    """Abort the agent's turn in progress (an interrupted turn is not resumed); queues stay.

    While a daemon owns the state directory, its running turn is cancelled through it.
    """
    if daemon_of(state) is not None:
        state.output.result(legacy_client.abort(state, agent_id), _render_abort)
        return
    with open_store(state.home) as store:
        row, owed = store.read(lambda tx: (tx.get_agent(agent_id), tx.read_owed(agent_id)))
    if row is None:
        raise UnknownAgentError(agent_id)
    was_owed = owed is not None
    aborted = False
    with open_system(state.home, resume=was_owed) as (system, _):
        if was_owed:
            # Only a running turn can be aborted, and between commands nothing runs: open
            # resumed the owed work, so abort it now, then stop everything else at its next
            # step (shutdown) instead of letting other agents run to completion.
            system.abort(agent_id, wait=True, timeout_seconds=timeout_seconds)
            aborted = True
            final_state = system.state(agent_id)
            system.shutdown()
        else:
            final_state = system.state(agent_id)
    value = {"agent_id": agent_id, "aborted": aborted, "state": final_state}
    state.output.result(value, _render_abort)


def _render_abort(v: dict[str, Any]) -> str:
    if v["aborted"]:
        return f"aborted the turn of {v['agent_id']} (now {v['state']})"
    return f"{v['agent_id']} had no turn in progress"


@click.command()
@click.argument("agent_id")
@click.option(
    "--timeout",
    "timeout_seconds",
    type=float,
    callback=check_seconds,
    default=DEFAULT_TIMEOUT_SECONDS,
    show_default=True,
)
@pass_state
def compact(state: CliState, agent_id: str, timeout_seconds: float) -> None:
    """Compact the agent's history now and wait for it."""
    with open_system(state.home, resume=False) as (system, _):
        before = system.context_tokens(agent_id)
        system.compact(agent_id, wait=True, timeout_seconds=timeout_seconds)
        _wait(system, agent_id, timeout_seconds)
        value = {
            "agent_id": agent_id,
            "compacted": True,
            "context_tokens_before": before,
            "messages": len(system.transcript(agent_id)),
            "state": system.state(agent_id),
        }
    state.output.result(
        value, lambda v: f"compacted {v['agent_id']}: {v['messages']} message(s) left"
    )
