"""A supervisor's last act: stopping its children from ``on_stop``, where its mailbox is shut.

Pykka runs ``on_stop`` after the mailbox loop ended, so nothing queued to the supervisor is
answered until it returns. A child blocked asking the supervisor would then keep the
supervisor waiting for it (up to its shutdown timeout, or forever) while the child waits for
the supervisor: a deadlock. So while it waits, the supervisor answers what is queued the way
pykka's teardown would (a request with ``ActorDeadError``), and takes note of exit reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import pykka
import pykka.messages

from agentkeep.actors.supervision.errors import SupervisorStoppedError
from agentkeep.actors.supervision.specs import ChildSpec
from agentkeep.actors.supervision.supervised import ChildExited

# How often a waiting supervisor answers requests that raced into its mailbox after it
# stopped taking them: a child checked ``is_alive`` just before, and queued just after.
DRAIN_INTERVAL_SECONDS = 0.05

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def stop_and_wait(
    spec: ChildSpec, ref: pykka.ActorRef[Any], *, while_waiting: Callable[[], None]
) -> bool:
    """Stop ``ref`` and wait for ``on_stop`` to finish; ``False`` if it timed out.

    ``while_waiting`` runs every :data:`DRAIN_INTERVAL_SECONDS` until then.
    """
    stopped = ref.stop(block=False)
    timeout = spec.shutdown_timeout_seconds
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        wait = DRAIN_INTERVAL_SECONDS
        if deadline is not None:
            wait = max(0.0, min(wait, deadline - time.monotonic()))
        try:
            stopped.get(timeout=wait)
        except pykka.Timeout:
            if deadline is not None and time.monotonic() >= deadline:
                return False
            while_waiting()
        else:
            return True


def drain_mailbox(
    actor: pykka.Actor,
    *,
    on_exit: Callable[[ChildExited], None],
    stop_replies: list[pykka.Future[Any]],
) -> None:
    """Answer everything queued to a stopped ``actor`` now, as pykka's teardown would later.

    Exit reports go to ``on_exit``. A stop request's reply (``ActorRef.stop``) is kept in
    ``stop_replies``, to be answered once the actor has really stopped.
    """
    inbox = actor.actor_inbox
    while not inbox.empty():  # the actor's own thread is the only one taking from it
        envelope = inbox.get()
        message = envelope.message
        if isinstance(message, ChildExited):
            on_exit(message)
        if envelope.reply_to is None:
            continue
        if isinstance(message, pykka.messages._ActorStop):
            stop_replies.append(envelope.reply_to)
        else:
            envelope.reply_to.set_exception(exc_info=dead_exc_info(actor))


def dead_exc_info(actor: pykka.Actor) -> ExcInfo:
    error = pykka.ActorDeadError(f"{actor.actor_ref} stopped before handling the message")
    return (pykka.ActorDeadError, error, None)


def stopped_exc_info(name: str) -> ExcInfo:
    error = SupervisorStoppedError(f"supervisor {name!r} stopped")
    return (SupervisorStoppedError, error, None)
