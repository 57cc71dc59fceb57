"""Commands that talk to an agent: send, steer, abort, compact (and today's form of talk,
which :mod:`agentkeep.cli.talking` runs).

The message is TEXT, ``-`` (read from stdin) or ``--file PATH``, so a long message can be
sent (argv stops near 128 KB; a message is at most ``max_input_bytes``, 512 KiB). ``send``,
``steer``, ``abort`` and ``compact`` are each one code path over the command's
:class:`~agentkeep.mcp.backend.Backend`
(:mod:`agentkeep.cli.transport`: the daemon's REST API, or this process's system), so they
print the same in both modes. ``send --wait`` waits through
:mod:`agentkeep.cli.turn_waiting`: a failed turn exits 5, Ctrl-C cancels the turn and exits
130, and ``--timeout`` bounds the whole wait. Today's ``talk AGENT_ID`` without a daemon
streams token by token through :mod:`agentkeep.cli.turns`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
import msgspec

from agentkeep.agent_system import AgentSystem
from agentkeep.cli.config import load_providers, message_options
from agentkeep.cli.context import CliState, pass_state
from agentkeep.cli.message_input import read_message
from agentkeep.cli.options import timeout_option
from agentkeep.cli.output import EXIT_FAILURE, CliError, Console, answer_text
from agentkeep.cli.runtime import StreamPrinter, open_system
from agentkeep.cli.transport import open_backend, runs_on_after_exit
from agentkeep.cli.turn_waiting import finish_quietly
from agentkeep.cli.turns import (
    EXIT_INTERRUPTED,
    Interrupts,
    RetryReporter,
    announce,
    wait_for_turn,
)
from agentkeep.delivery import Delivery, DeliveryKind
from agentkeep.errors import TurnStateError, UnknownAgentError
from agentkeep.mcp.tools import answer_of
from agentkeep.messages import user
from agentkeep.sessions import UnknownSessionError
from agentkeep.types import MessageOptions, QueueName
from agentkeep.types.ids import ID_RULE, new_id

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
        delivery = system.internals.deliver(
            agent_id, queue, user(message), id=message_id, options=options
        )
        wait_for_turn(system, agent_id, timeout_seconds, interrupts, json_mode=state.json_mode)
        return _result(system, agent_id, delivery, waited=True)


@contextmanager
def agent_errors(agent_id: str) -> Iterator[None]:
    """Today's commands name agents: a session the backend does not know (the same id,
    SURFACES §1) is reported as the unknown agent, in both modes."""
    try:
        yield
    except UnknownSessionError:
        raise UnknownAgentError(agent_id) from None


def _deliver(
    state: CliState,
    delivery: DeliveryKind,
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
    """``send``/``steer``: one path over the command's backend (``transport``).

    The message id is chosen here when ``--id`` is not given, so the result names it in
    both modes. Without ``--wait`` the message is accepted durably and the command returns:
    a daemon runs it at once, directly it waits for ``agentkeep resume`` (said on stderr).
    """
    message = read_message(text, file_path)
    state.home.require_store()
    chosen = message_options(load_providers(state.home.path), provider, model)
    key = new_id() if message_id is None else message_id
    reporter = RetryReporter(agent_id, json_mode=state.json_mode)
    with (
        agent_errors(agent_id),
        open_backend(
            state, run_sends=wait, cancel_timeout_seconds=timeout_seconds, features=[reporter]
        ) as backend,
    ):
        sent = backend.send(
            agent_id,
            message,
            delivery=delivery,
            idempotency_key=None,
            metadata=None,
            message_id=key,
            options=None if chosen == MessageOptions() else chosen,
        )
        answer = None
        if wait:
            answer = answer_of(
                finish_quietly(state, backend, sent.turn, timeout_seconds=timeout_seconds)
            )
        elif not runs_on_after_exit(backend) and not state.json_mode:
            click.echo(
                "note: nothing runs it until `agentkeep resume` (or send with --wait)", err=True
            )
    value = {
        "agent_id": agent_id,
        "id": key,
        "delivery": delivery,
        "created": not sent.duplicate,
        "waited": wait,
        # Waited: the turn completed (anything else exited non-zero). Not waited: the
        # message is durable ("accepted"); whether it runs yet depends on the transport.
        "state": "idle" if wait else "accepted",
        "answer": answer,
    }
    state.output.result(value, _render_delivery)


def _render_delivery(v: dict[str, Any]) -> str:
    if v["waited"]:
        return v["answer"] or "(no answer)"
    verb = "queued" if v["created"] else "already queued"
    return f"{verb} message {v['id']} for {v['agent_id']} ({v['delivery']})"


_WAIT_HELP = (
    "Run the agent and wait for its answer: a failed turn exits 5, Ctrl-C aborts the turn "
    "(exit 130)."
)


def _delivery_command(delivery: DeliveryKind, summary: str) -> click.Command:
    """The ``send`` or ``steer`` command: the same arguments and flags, one delivery each."""

    @click.command(
        name=delivery,
        help=f"{summary}\n\nThe message is TEXT, - (read from stdin) or --file PATH.",
    )
    @click.argument("agent_id")
    @message_flags
    @click.option("--wait", is_flag=True, help=_WAIT_HELP)
    @pass_state
    def command(
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
        _deliver(
            state,
            delivery,
            agent_id,
            text,
            file_path,
            model=model,
            provider=provider,
            message_id=message_id,
            wait=wait,
            timeout_seconds=timeout_seconds,
        )

    return command


send = _delivery_command(
    "send",
    "Queue a user message (durable on return); --wait runs the agent and prints the answer.",
)
steer = _delivery_command(
    "steer", "Queue a steering message: it joins the current turn at its next stop."
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
@timeout_option("Seconds.", default=30.0)
@pass_state
def abort(state: CliState, agent_id: str, timeout_seconds: float) -> None:
    """Abort the agent's turn in progress: its active turn is cancelled (the running one,
    else the queued one); turns queued behind it stay. Through a daemon or directly alike.
    """
    with (
        agent_errors(agent_id),
        open_backend(state, cancel_timeout_seconds=timeout_seconds) as backend,
    ):
        backend.get_session(agent_id)  # an unknown agent is exit 4, not "nothing to abort"
        try:
            turn = backend.cancel_turn(agent_id, None)
        except TurnStateError:
            # No live turn: idle, or owing work no turn holds (a failed turn's question),
            # which `session settle` ends (issue 28: the way out is named).
            owes = backend.get_session(agent_id).owes
            value = {"agent_id": agent_id, "aborted": False, "state": "idle"}
            if owes is not None:
                value.update(state="owes_work", owes=msgspec.to_builtins(owes))
        else:
            value = {
                "agent_id": agent_id,
                "aborted": True,
                "state": "idle" if turn.terminal else "running",
            }
    state.output.result(value, _render_abort)


def _render_abort(v: dict[str, Any]) -> str:
    if v["aborted"]:
        return f"aborted the turn of {v['agent_id']} (now {v['state']})"
    if v["state"] == "owes_work":
        return (
            f"{v['agent_id']} had no turn in progress, but it owes work no turn holds "
            f"({v['owes']['reason']}): `agentkeep session settle {v['agent_id']}` ends it"
        )
    return f"{v['agent_id']} had no turn in progress"


@click.command()
@click.argument("agent_id")
@timeout_option()
@pass_state
def compact(state: CliState, agent_id: str, timeout_seconds: float) -> None:
    """Compact the agent's history now and wait for it (through a daemon: its wait bound)."""
    with agent_errors(agent_id), open_backend(state) as backend:
        try:
            done = backend.compact(agent_id, timeout_seconds=timeout_seconds)
        except TimeoutError:
            raise CliError(
                f'The compaction of agent "{agent_id}" did not finish within the wait; it goes on.',
                code="timeout",
                hint="Look at it later with `agentkeep show`, or pass a larger --timeout.",
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
