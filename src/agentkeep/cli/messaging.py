"""Commands that talk to an agent: send, steer, talk, abort, compact."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from agentkeep.agent_system import AgentSystem
from agentkeep.cli.admin import DEFAULT_TIMEOUT_SECONDS
from agentkeep.cli.config import check_provider, load_providers
from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.output import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    CliError,
    Console,
    answer_text,
)
from agentkeep.cli.runtime import StreamPrinter, open_store, open_system
from agentkeep.delivery import Delivery, user
from agentkeep.errors import UnknownAgentError
from agentkeep.persistence.records import MessageOptions, QueueName

F = TypeVar("F", bound=Callable[..., Any])


def _message_options(function: F) -> F:
    for option in reversed(
        [
            click.option("--model", help="The model for this message (and after it)."),
            click.option("--provider", help="The provider id (see providers.toml)."),
            click.option(
                "--id",
                "message_id",
                help="A message id for idempotent delivery: resending it is a no-op.",
            ),
            click.option(
                "--timeout",
                "timeout_seconds",
                type=float,
                default=DEFAULT_TIMEOUT_SECONDS,
                show_default=True,
                help="Seconds to wait for the answer.",
            ),
        ]
    ):
        function = option(function)
    return function


def _checked_text(text: str) -> str:
    if not text.strip():
        raise CliError(
            "The message is empty.",
            code="empty_message",
            hint='Pass the text to send, e.g. agentkeep send ID "What is 2+2?".',
            exit_code=EXIT_BAD_INPUT,
        )
    return text


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


def _deliver(
    state: CliState,
    queue: QueueName,
    agent_id: str,
    text: str,
    *,
    model: str | None,
    provider: str | None,
    message_id: str | None,
    wait: bool,
    timeout_seconds: float,
) -> None:
    message = user(_checked_text(text))
    options = MessageOptions(provider=provider, model=model)
    state.home.require_store()
    check_provider(load_providers(state.home.path), provider)
    if not wait:
        # Durable enqueue only: the agent runs it on `agentkeep resume` (or any later
        # command that runs it); nothing else in the store starts.
        with open_system(state.home, resume=False) as (system, _):
            delivery = system.deliver(
                agent_id, queue, message, id=message_id, options=options, start=False
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
        with open_system(state.home, resume=False) as (system, _):
            delivery = system.deliver(agent_id, queue, message, id=message_id, options=options)
            _wait(system, agent_id, timeout_seconds)
            value = _result(system, agent_id, delivery, waited=True)

    def render(v: dict[str, Any]) -> str:
        if v["waited"]:
            return v["answer"] or f"(no answer; the agent is {v['state']})"
        verb = "queued" if v["created"] else "already queued"
        return (
            f"{verb} message {v['id']} for {v['agent_id']} ({v['delivery']}); "
            "run `agentkeep resume` to let it answer, or pass --wait"
        )

    state.output.result(value, render)


@click.command()
@click.argument("agent_id")
@click.argument("text")
@_message_options
@click.option("--wait", is_flag=True, help="Run the agent and wait for its answer.")
@pass_state
def send(
    state: CliState,
    agent_id: str,
    text: str,
    model: str | None,
    provider: str | None,
    message_id: str | None,
    timeout_seconds: float,
    wait: bool,
) -> None:
    """Queue a user message (durable on return); --wait runs the agent and prints the answer."""
    _deliver(
        state,
        "send",
        agent_id,
        text,
        model=model,
        provider=provider,
        message_id=message_id,
        wait=wait,
        timeout_seconds=timeout_seconds,
    )


@click.command()
@click.argument("agent_id")
@click.argument("text")
@_message_options
@click.option("--wait", is_flag=True, help="Run the agent and wait for its answer.")
@pass_state
def steer(
    state: CliState,
    agent_id: str,
    text: str,
    model: str | None,
    provider: str | None,
    message_id: str | None,
    timeout_seconds: float,
    wait: bool,
) -> None:
    """Queue a steering message: it joins the current turn at its next stop."""
    _deliver(
        state,
        "steering",
        agent_id,
        text,
        model=model,
        provider=provider,
        message_id=message_id,
        wait=wait,
        timeout_seconds=timeout_seconds,
    )


@click.command()
@click.argument("agent_id")
@click.argument("text")
@_message_options
@pass_state
def talk(
    state: CliState,
    agent_id: str,
    text: str,
    model: str | None,
    provider: str | None,
    message_id: str | None,
    timeout_seconds: float,
) -> None:
    """Send a message and stream the answer as it arrives, tool calls as they run.

    With --json, prints one JSON object per line (text_delta, tool_call, tool_started,
    tool_finished, response_done) and a final {"event": "done", ...}.
    """
    message = user(_checked_text(text))
    state.home.require_store()
    check_provider(load_providers(state.home.path), provider)
    printer = StreamPrinter(agent_id, Console(), json_lines=state.json_mode)
    options = MessageOptions(provider=provider, model=model)
    with open_system(state.home, resume=False, features=[printer], observer=printer) as (
        system,
        _,
    ):
        delivery = system.deliver(agent_id, "send", message, id=message_id, options=options)
        _wait(system, agent_id, timeout_seconds)
        value = _result(system, agent_id, delivery, waited=True)
    if state.json_mode:
        state.output.event({"event": "done", **value})


@click.command()
@click.argument("agent_id")
@click.option(
    "--timeout", "timeout_seconds", type=float, default=30.0, show_default=True, help="Seconds."
)
@pass_state
def abort(state: CliState, agent_id: str, timeout_seconds: float) -> None:
    """Abort the agent's turn in progress (an interrupted turn is not resumed); queues stay."""
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
    state.output.result(
        value,
        lambda v: (
            f"aborted the turn of {v['agent_id']} (now {v['state']})"
            if v["aborted"]
            else f"{v['agent_id']} had no turn in progress"
        ),
    )


@click.command()
@click.argument("agent_id")
@click.option(
    "--timeout", "timeout_seconds", type=float, default=DEFAULT_TIMEOUT_SECONDS, show_default=True
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
