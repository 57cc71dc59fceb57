"""Waiting for an agent's turn from ``send --wait`` and ``talk``: bounded, interruptible,
and honest about how it ended.

* The wait polls in short slices, so it notices Ctrl-C and its ``--timeout`` promptly.
* A turn that failed (the conversation ends in the loop's failure note) is an error with
  its own exit code (:data:`EXIT_TURN_FAILED`) and the failure printed; its question stays
  owed, so ``agentkeep resume`` asks again.
* A wait past ``--timeout`` stops the agent's actor (cancelling its request, even one a
  provider is retrying) and exits: the turn stays owed, nothing accepted is lost.
* The first Ctrl-C aborts the turn, prints one line and exits :data:`EXIT_INTERRUPTED`;
  a second exits at once (see :class:`Interrupts`).
* :class:`RetryReporter` shows a provider's retries on stderr as they happen.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

import click
import msgspec

from agentkeep.agent_system import AgentSystem
from agentkeep.cli.output import EXIT_FAILURE, CliError, block_text
from agentkeep.features import Feature, HookContext
from agentkeep.loop.texts import FAILURE_NOTE
from agentkeep.loop.view import ends_in_failure_note
from agentkeep.types import Retrying, StreamEvent
from agentkeep.types.records import SystemRecord

EXIT_TURN_FAILED = 5  # the agent's turn failed; the failure is printed, the turn stays owed
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT): the turn was aborted

# How often a wait looks at Ctrl-C and its deadline: well inside the one second a person
# waits for Ctrl-C to take effect.
POLL_SECONDS = 0.05
# How long the first Ctrl-C waits for the aborted turn to unwind before stopping the actor
# anyway (a tool that ignores cancellation); a second Ctrl-C cuts it short.
ABORT_UNWIND_SECONDS = 5.0


class Interrupts:
    """Counts SIGINTs while a command waits on a turn; the second ends the process at once.

    The handler never takes a lock and never calls into the agent system: a Python signal
    handler runs in the main thread between two bytecodes, possibly while that thread holds
    any lock (an ``Event``'s, the store's), so it only bumps a counter that the wait loop
    reads. On the second SIGINT it calls ``os._exit``. That loses nothing accepted: every
    message was durable before ``deliver`` returned and every step of a turn commits before
    it acts, so the store is exactly as after a SIGKILL, which recovery is built and tested
    for (an unfinished turn stays owed and resumes at the next start).
    """

    def __init__(self) -> None:
        self.count = 0
        self.announced = False  # the one line of the first Ctrl-C was printed

    @property
    def interrupted(self) -> bool:
        return self.count > 0

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count >= 2:
            if not self.announced:
                os.write(2, b"interrupted\n")
            os._exit(EXIT_INTERRUPTED)

    @contextmanager
    def installed(self) -> Iterator[Interrupts]:
        """Handle SIGINT inside the block (only the main thread can; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._handle)
        try:
            yield self
        finally:
            # After a Ctrl-C the process is on its way out: a second one must still exit
            # at once (130), not raise KeyboardInterrupt into the teardown.
            if not self.interrupted:
                signal.signal(signal.SIGINT, previous)


class RetryReporter(Feature):
    """Prints one agent's provider retries on stderr (a JSON line each with ``--json``)."""

    name = "cli-retry-reporter"

    def __init__(self, agent_id: str, *, json_mode: bool) -> None:
        self.agent_id = agent_id
        self._json = json_mode

    def on_event(self, ctx: HookContext, event: StreamEvent) -> None:
        if ctx.agent_id != self.agent_id or not isinstance(event, Retrying):
            return
        if self._json:
            line = msgspec.json.encode(
                {
                    "event": "retrying",
                    "agent_id": ctx.agent_id,
                    "attempt": event.attempt,
                    "reason": event.reason,
                    "delay_seconds": round(event.delay_seconds, 3),
                }
            ).decode()
        else:
            line = (
                f"retrying ({event.attempt}): {event.reason}; "
                f"next attempt in {event.delay_seconds:.1f}s"
            )
        click.echo(line, err=True)


def announce(message: str, *, json_mode: bool) -> None:
    """The one line a Ctrl-C prints on stderr (a JSON error object with ``--json``)."""
    if json_mode:
        error = {"error": {"code": "interrupted", "message": message, "hint": None}}
        click.echo(msgspec.json.encode(error).decode(), err=True)
    else:
        click.echo(f"interrupted: {message}", err=True)


def _idle_within(
    system: AgentSystem, agent_id: str, seconds: float, interrupts: Interrupts | None
) -> bool:
    """Wait up to ``seconds`` for the agent to be idle, in short slices; False on timeout or
    (when ``interrupts`` is given) as soon as a Ctrl-C arrived."""
    deadline = time.monotonic() + seconds
    while True:
        if interrupts is not None and interrupts.interrupted:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if system.wait_for_idle(agent_id, timeout_seconds=min(POLL_SECONDS, remaining)):
            return True


def _interrupted(
    system: AgentSystem, agent_id: str, interrupts: Interrupts, *, json_mode: bool
) -> click.exceptions.Exit:
    """The first Ctrl-C: abort the turn, let it unwind, stop. Returns the exit to raise."""
    announce(f'aborted the turn of "{agent_id}" (Ctrl-C again exits at once)', json_mode=json_mode)
    interrupts.announced = True
    system.abort(agent_id, wait=False)
    if not _idle_within(system, agent_id, ABORT_UNWIND_SECONDS, None):
        system.close(timeout_seconds=0)  # something ignores cancellation: stop its actor
    return click.exceptions.Exit(EXIT_INTERRUPTED)


def failure_of_last_turn(system: AgentSystem, agent_id: str) -> str | None:
    """The failure note the conversation ends in (its last turn failed), or None."""
    records = system.internals.store.read(lambda tx: tx.records.load(agent_id))
    if not ends_in_failure_note(records):
        return None
    last = records[-1]
    assert isinstance(last, SystemRecord)
    return block_text(tuple(last.message.content)).removeprefix(FAILURE_NOTE.format(""))


def wait_for_turn(
    system: AgentSystem,
    agent_id: str,
    timeout_seconds: float,
    interrupts: Interrupts,
    *,
    json_mode: bool,
) -> None:
    """Wait until the agent settled after a message it was sent, and judge the turn.

    Raises:
        click.exceptions.Exit: Ctrl-C: the turn was aborted (exit 130).
        CliError: The wait timed out (the turn was stopped, it stays owed), or the turn
            failed (exit 5, the failure in the message).
    """
    if not _idle_within(system, agent_id, timeout_seconds, interrupts):
        if interrupts.interrupted:
            raise _interrupted(system, agent_id, interrupts, json_mode=json_mode)
        # Stop the actor now (its request is cancelled, even a retry's wait), instead of
        # letting close wait for a turn nobody waits for any more; it stays owed.
        system.close(timeout_seconds=0)
        raise CliError(
            f'Agent "{agent_id}" was still working after {timeout_seconds:g}s; its turn was '
            "stopped and stays owed.",
            code="timeout",
            hint="Run `agentkeep resume` to let it finish, or pass a larger --timeout.",
            exit_code=EXIT_FAILURE,
        )
    failure = failure_of_last_turn(system, agent_id)
    if failure is not None:
        raise CliError(
            f'The turn of agent "{agent_id}" failed: {failure}',
            code="turn_failed",
            hint="Its question stays owed: run `agentkeep resume` to ask again, send "
            f"another message, or end it with `agentkeep session settle {agent_id}`.",
            exit_code=EXIT_TURN_FAILED,
        )
