"""A cheaper mailbox for busy pykka actors.

Pykka's ``ThreadingActor`` gives every actor a ``queue.Queue``: each ``tell`` and each take
runs Python-level ``Condition`` code (enter, exit, ``notify``) around the deque, in the
sending thread and in the actor's — several microseconds a hop, on every hop of a step.
Pykka only ever calls ``put``, ``get`` (blocking, no timeout) and ``empty`` on an actor's
inbox (its ``ActorInbox`` protocol: ``tell``/``ask`` put, the actor loop gets, the teardown
and ``supervision.shutdown.drain_mailbox`` drain with ``empty``/``get`` from the actor's own
thread), and ``queue.SimpleQueue`` has all three, implemented in C, FIFO, unbounded, with
the same thread-safety — so it is a drop-in: same order, same blocking, the stop message and
the teardown's answers to what was left unchanged.
"""

from __future__ import annotations

import queue
from typing import TYPE_CHECKING, Any

import pykka

if TYPE_CHECKING:
    from pykka._actor import ActorInbox


class SimpleInboxMixin(pykka.Actor):
    """Gives a threading actor a ``queue.SimpleQueue`` mailbox. Mix it in before the pykka
    actor class: ``class Busy(SimpleInboxMixin, pykka.ThreadingActor)``."""

    @staticmethod
    def _create_actor_inbox() -> ActorInbox:
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        return inbox
