"""Sending a turn and waiting for it over a :class:`~agentkeep.mcp.backend.Backend`: the
shared end of ``session send`` and ``talk``, the same through the daemon or directly.

* The answer streams as its blocks commit (``assistant.block`` events of the turn, read
  from the ledger: the daemon's SSE stream, or ``AgentSystem.subscribe``).
* A wait shows its progress on stderr (a line after :data:`PROGRESS_SECONDS` without answer
  text or one, in text mode) and is bounded by ``--timeout`` in every mode, streamed or
  not: past it the command exits 1; through a daemon the turn goes on, directly it is
  stopped as the command exits and stays owed.
* The turn's end decides the exit code: ``completed`` 0, ``failed`` 5, ``cancelled`` or
  ``interrupted`` 1. Ctrl-C cancels the turn and exits 130.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import click
import msgspec

from agentkeep.cli.context import CliState
from agentkeep.cli.output import EXIT_FAILURE, CliError
from agentkeep.cli.transport import runs_on_after_exit
from agentkeep.cli.turns import EXIT_INTERRUPTED, EXIT_TURN_FAILED, announce
from agentkeep.delivery import DeliveryKind
from agentkeep.mcp.backend import Backend
from agentkeep.mcp.tools import answer_of
from agentkeep.mcp.types import AgentMessage
from agentkeep.server.turn_wire import turn_out
from agentkeep.types.ledger import ASSISTANT_BLOCK
from agentkeep.types.turns import SentTurn, TurnRecord

PROGRESS_SECONDS = 5.0  # a line on stderr this often while a turn is still live


def sent_value(turn: TurnRecord, duplicate: bool) -> dict[str, Any]:
    """What ``session send`` and ``talk`` print with ``--json``: the daemon's ``SentTurnOut``
    (``turn``, ``duplicate``) and the answer's text once the turn completed."""
    return {
        "turn": msgspec.to_builtins(turn_out(turn)),
        "duplicate": duplicate,
        "answer": answer_of(turn),
    }


class _Deadline:
    """One wait's bound (``--timeout``) and when it last showed something on stderr/stdout."""

    def __init__(self, timeout_seconds: float) -> None:
        self.started = time.monotonic()
        self.timeout_seconds = timeout_seconds
        self.at = self.started + timeout_seconds
        self.shown = self.started  # the last answer text or progress line

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def progress_due(self) -> bool:
        return time.monotonic() - self.shown >= PROGRESS_SECONDS

    def progress(self, turn: TurnRecord) -> None:
        """The progress line on stderr: the turn is still live."""
        waited = time.monotonic() - self.started
        click.echo(f"… turn {turn.id} is {turn.status} ({waited:.0f}s)", err=True)
        self.shown = time.monotonic()


def _stream(backend: Backend, turn: TurnRecord, deadline: _Deadline) -> bool:
    """Print the turn's answer as its text blocks commit, until the turn's end; a progress
    line after :data:`PROGRESS_SECONDS` without one; past the deadline, the timeout error.
    True if any answer text was printed."""
    printed = False
    after = 0
    while True:
        remaining = deadline.remaining()
        if remaining <= 0:
            raise _timed_out(backend, backend.get_turn(turn.session_id, turn.id), deadline)
        idle = min(PROGRESS_SECONDS, remaining)
        with contextlib.closing(
            backend.follow(turn.session_id, after=after, turn_id=turn.id, idle_seconds=idle)
        ) as events:
            for event in events:
                if event is None:
                    break  # a tick: check the deadline, maybe show progress, follow on
                if event.ephemeral:
                    continue  # a live delta: the answer is printed as its blocks commit
                after = event.sequence
                block = event.data.get("block") if event.type == ASSISTANT_BLOCK else None
                if isinstance(block, dict) and block.get("type") == "text" and block.get("text"):
                    click.echo(str(block["text"]))
                    printed = True
                    deadline.shown = time.monotonic()
            else:
                return printed  # the turn's terminal event came
        if deadline.progress_due() and deadline.remaining() > 0:
            deadline.progress(backend.get_turn(turn.session_id, turn.id))


def _wait(backend: Backend, turn: TurnRecord, deadline: _Deadline, quiet: bool) -> TurnRecord:
    while not turn.terminal:
        remaining = deadline.remaining()
        if remaining <= 0:
            raise _timed_out(backend, turn, deadline)
        try:
            return backend.wait_turn(
                turn.session_id, turn.id, timeout_seconds=min(PROGRESS_SECONDS, remaining)
            )
        except TimeoutError:
            turn = backend.get_turn(turn.session_id, turn.id)
            if not quiet and deadline.remaining() > 0:
                deadline.progress(turn)
    return turn


def _timed_out(backend: Backend, turn: TurnRecord, deadline: _Deadline) -> CliError:
    """A wait past ``--timeout``: through a daemon the turn goes on; directly this process
    stops it as it exits (``transport.open_backend``) and it stays owed."""
    where = f'Turn "{turn.id}" of session "{turn.session_id}"'
    timeout_seconds = deadline.timeout_seconds
    if runs_on_after_exit(backend):
        return CliError(
            f"{where} is still {turn.status} after {timeout_seconds:g}s; it goes on.",
            code="timeout",
            hint=f"Follow it with `agentkeep session events {turn.session_id} --follow`, "
            f"or cancel it with `agentkeep session cancel {turn.session_id}`.",
            exit_code=EXIT_FAILURE,
        )
    return CliError(
        f"{where} is still {turn.status} after {timeout_seconds:g}s; it was stopped and "
        "stays owed.",
        code="timeout",
        hint="Run `agentkeep resume` to let it finish, or pass a larger --timeout.",
        exit_code=EXIT_FAILURE,
    )


def judge(turn: TurnRecord) -> None:
    """Raise the CLI error of a turn that did not complete (module docstring)."""
    if turn.status == "failed":
        reason = turn.error.message if turn.error is not None else "no reason recorded"
        raise CliError(
            f'Turn "{turn.id}" of session "{turn.session_id}" failed: {reason}',
            code="turn_failed",
            hint="Its question stays owed: send the message again (a new --key), or end "
            f"the owed work with `agentkeep session settle {turn.session_id}`; read "
            f"`agentkeep session events {turn.session_id}` for what happened.",
            exit_code=EXIT_TURN_FAILED,
        )
    if turn.status in ("cancelled", "interrupted"):
        raise CliError(
            f'Turn "{turn.id}" of session "{turn.session_id}" was {turn.status}.',
            code=f"turn_{turn.status}",
            exit_code=EXIT_FAILURE,
        )


def finish_quietly(
    state: CliState, backend: Backend, turn: TurnRecord, *, timeout_seconds: float
) -> TurnRecord:
    """Wait for the turn's end without streaming it (progress on stderr) and judge it;
    Ctrl-C cancels the turn and exits 130."""
    try:
        turn = _wait(backend, turn, _Deadline(timeout_seconds), quiet=state.json_mode)
    except KeyboardInterrupt:
        raise _cancelled(state, backend, turn) from None
    judge(turn)
    return turn


def _cancelled(state: CliState, backend: Backend, turn: TurnRecord) -> click.exceptions.Exit:
    """The first Ctrl-C of a wait: cancel the turn; returns the exit (130) to raise."""
    announce(
        f'cancelled turn "{turn.id}" of session "{turn.session_id}"',
        json_mode=state.json_mode,
    )
    backend.cancel_turn(turn.session_id, turn.id)
    return click.exceptions.Exit(EXIT_INTERRUPTED)


def send_turn(
    state: CliState,
    backend: Backend,
    session_id: str,
    message: str | AgentMessage,
    *,
    delivery: DeliveryKind,
    idempotency_key: str | None,
    wait: bool,
    timeout_seconds: float,
) -> None:
    """Send ``message`` as a turn of the session (durable on return), then :func:`finish` it,
    streaming the answer in text mode."""
    sent = backend.send(
        session_id, message, delivery=delivery, idempotency_key=idempotency_key, metadata=None
    )
    finish(
        state, backend, sent, wait=wait, stream=not state.json_mode, timeout_seconds=timeout_seconds
    )


def finish(
    state: CliState,
    backend: Backend,
    sent: SentTurn,
    *,
    wait: bool,
    stream: bool,
    timeout_seconds: float,
) -> None:
    """Print the sent turn (``wait`` False), or wait for its end, streaming the answer when
    ``stream`` (text mode), and print it; a turn that did not complete exits non-zero."""
    turn = sent.turn
    if not wait:
        state.output.result(
            sent_value(turn, sent.duplicate),
            lambda v: (
                f"turn {turn.id} of session {turn.session_id}: {turn.status}"
                + (" (already accepted)" if sent.duplicate else "")
            ),
        )
        return
    printed = False
    deadline = _Deadline(timeout_seconds)  # one bound for the stream and the wait after it
    try:
        if stream and not turn.terminal:
            printed = _stream(backend, turn, deadline)
        turn = _wait(
            backend, backend.get_turn(turn.session_id, turn.id), deadline, quiet=state.json_mode
        )
    except KeyboardInterrupt:
        raise _cancelled(state, backend, turn) from None
    value = sent_value(turn, sent.duplicate)
    if state.json_mode:
        state.output.result(value)
    elif not printed and value["answer"]:
        click.echo(value["answer"])
    judge(turn)
