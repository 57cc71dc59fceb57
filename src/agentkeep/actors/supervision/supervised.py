"""The link from a child to its supervisor: how a supervisor learns that a child has exited.

Pykka has no links or monitors, so the child reports its own exit. :class:`SupervisedActor`
(or :class:`SupervisedMixin` on any other pykka actor class) tells its supervisor one
:class:`ChildExited` per incarnation, as the **last thing its thread does**: after ``on_stop``
or ``on_failure`` and after pykka answered what was left in its mailbox. So when the supervisor
hears of the exit, the old incarnation has run its last line of code, and a restart can never
overlap it (an agent is never loaded twice at once).

How a child finds its supervisor: while a supervisor runs a child spec's ``start``, it sets a
context variable; the first :class:`SupervisedMixin` constructed under it claims it in
``__init__``, which pykka runs in the caller's thread, before the actor's own thread exists. So
the link is in place before the child can run, or fail, at all: there is no window in which a
child could die unreported.

Why the report is not sent from ``on_failure``/``on_stop``: pykka routes an exception raised in
``on_start`` or ``on_stop`` around ``on_failure``, and a subclass that overrides those hooks
without calling ``super()`` would silently cut the link. The mixin therefore records the failure
in pykka's single failure funnel (``Actor._handle_failure``, which every unhandled exception
passes through) and reports from the end of the actor's thread loop (``Actor._actor_loop``);
``on_start``, ``on_stop`` and ``on_failure`` stay entirely the subclass's own. Both are private
pykka methods, stable across pykka 4; ``tests/unit/actors`` pins the behaviour we rely on, so a
pykka upgrade that changes it fails loudly.

The link also lets a call tell where it comes from: each supervised actor's thread knows its
chain of supervisors up to the root, so a call that would wait on its own caller (a child
terminating itself, waiting for its root to stop) is refused instead of deadlocking.

An actor that is not a :class:`SupervisedMixin` can be supervised too: the supervisor then runs
a small daemon thread that waits on the ref's public ``actor_stopped`` event. Pykka keeps no exit
reason, so every exit the supervisor did not ask for counts as abnormal.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from types import TracebackType
from typing import Any

import msgspec
import pykka


class ChildExited(msgspec.Struct, frozen=True, kw_only=True):
    """Told to a supervisor when one incarnation of its child has exited.

    Attributes:
        child_id: The child's id in its supervisor.
        actor_urn: The incarnation that exited (a later incarnation has another urn, so a late
            report about an old one is recognised and ignored).
        failure: The exception that killed it, or ``None`` for a normal exit.
        reason_known: ``False`` when the child is not a :class:`SupervisedMixin` and was only
            seen to stop (the supervisor treats that as abnormal unless it asked for the stop).
    """

    child_id: str
    actor_urn: str
    failure: BaseException | None
    reason_known: bool = True


class _LinkSlot:
    """The link a supervisor offers while it runs one child's ``start``."""

    __slots__ = ("child_id", "claimed_urn", "outer", "supervisor", "supervisor_link")

    def __init__(
        self,
        supervisor: pykka.ActorRef[Any],
        child_id: str,
        *,
        supervisor_link: _LinkSlot | None,
        outer: _LinkSlot | None,
    ) -> None:
        self.supervisor = supervisor
        self.child_id = child_id
        self.claimed_urn: str | None = None
        # The supervisor's own link to its parent: the way up the tree.
        self.supervisor_link = supervisor_link
        # The slot of a supervisor whose child's start is starting this supervisor.
        self.outer = outer


_offered_link: ContextVar[_LinkSlot | None] = ContextVar("agentkeep_offered_link", default=None)

# In a supervised actor's thread: ``link`` is that actor's link to its supervisor.
_running = threading.local()


@contextmanager
def offering_link(
    supervisor: pykka.ActorRef[Any], child_id: str, *, supervisor_link: _LinkSlot | None
) -> Iterator[_LinkSlot]:
    """Offer a link to the first supervised actor constructed in this block."""
    slot = _LinkSlot(
        supervisor, child_id, supervisor_link=supervisor_link, outer=_offered_link.get()
    )
    token = _offered_link.set(slot)
    try:
        yield slot
    finally:
        _offered_link.reset(token)


def supervisors_busy_here() -> list[str]:
    """The urns of the supervisors busy running a child's ``start`` in this thread.

    Nested: a parent runs the start of a child supervisor, which runs its children's starts.
    """
    urns = []
    slot = _offered_link.get()
    while slot is not None:
        urns.append(slot.supervisor.actor_urn)
        slot = slot.outer
    return urns


def ancestry_here() -> list[tuple[str, str]]:
    """``(supervisor urn, child id)`` of the supervised actor running this thread, then of its
    supervisor, and so on up to the root; empty outside a supervised actor."""
    chain = []
    link: _LinkSlot | None = getattr(_running, "link", None)
    while link is not None:
        chain.append((link.supervisor.actor_urn, link.child_id))
        link = link.supervisor_link
    return chain


def tell_quietly(ref: pykka.ActorRef[Any], message: Any) -> None:
    """Tell ``ref``; a dead recipient has nobody left to care, so that is not an error."""
    with suppress(pykka.ActorDeadError):
        ref.tell(message)


def watch_unlinked_child(
    ref: pykka.ActorRef[Any], supervisor: pykka.ActorRef[Any], child_id: str
) -> None:
    """Report the stop of a child that cannot report it itself (not a SupervisedMixin)."""

    def wait_then_report() -> None:
        ref.actor_stopped.wait()
        tell_quietly(
            supervisor,
            ChildExited(
                child_id=child_id, actor_urn=ref.actor_urn, failure=None, reason_known=False
            ),
        )

    # A daemon thread: a watcher must never be what keeps a process alive.
    threading.Thread(
        target=wait_then_report, name=f"agentkeep-watch-{child_id}", daemon=True
    ).start()


class SupervisedMixin(pykka.Actor):
    """Makes a pykka actor report its exits to the supervisor that started it.

    Mix it in first: ``class Writer(SupervisedMixin, SomeActor)``, or subclass
    :class:`SupervisedActor`. Nothing else is needed: ``on_start``, ``on_stop``, ``on_failure``
    and ``on_receive`` remain yours and need not call ``super()``.

    What counts as a failure (abnormal exit): an exception escaping ``on_start``, the
    handling of a ``tell``\\ ed message (pykka then stops the actor), ``on_stop`` or
    ``on_failure``. What counts as a normal exit: a stop, whoever asked for it (``self.stop()``
    to passivate, the supervisor, ``ActorRef.stop``). An exception escaping an ``ask`` goes back
    to the caller and the actor lives on: not an exit. A ``BaseException`` makes pykka stop every
    actor in the process, supervisors included; it is reported as a normal stop, and nothing is
    restarted because nothing is left to restart it.

    An actor constructed outside any supervisor's child ``start`` is simply unsupervised.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        slot = _offered_link.get()
        self._supervision_link: _LinkSlot | None = None
        if slot is not None and slot.claimed_urn is None:
            slot.claimed_urn = self.actor_urn
            self._supervision_link = slot
        self._supervision_failure: BaseException | None = None

    @property
    def supervised_child_id(self) -> str | None:
        """This actor's child id in its supervisor, or ``None`` if it is unsupervised."""
        link = self._supervision_link
        return None if link is None else link.child_id

    def _record_exit_failure(self, failure: BaseException) -> None:
        """Make this incarnation's exit abnormal, with ``failure`` as its reason.

        The first failure wins: it is the cause, later ones are consequences (say, ``on_failure``
        raising while cleaning up after it).
        """
        if self._supervision_failure is None:
            self._supervision_failure = failure

    def _handle_failure(
        self,
        exception_type: type[BaseException] | None,
        exception_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        super()._handle_failure(exception_type, exception_value, traceback)
        if exception_value is None:
            exception_value = RuntimeError(f"{exception_type!r} raised without a value")
        self._record_exit_failure(exception_value)

    def _actor_loop(self) -> None:
        _running.link = self._supervision_link
        try:
            super()._actor_loop()
        finally:
            link = self._supervision_link
            if link is not None:
                tell_quietly(
                    link.supervisor,
                    ChildExited(
                        child_id=link.child_id,
                        actor_urn=self.actor_urn,
                        failure=self._supervision_failure,
                    ),
                )


class SupervisedActor(SupervisedMixin, pykka.ThreadingActor):
    """A :class:`pykka.ThreadingActor` that reports its exits to its supervisor.

    See :class:`SupervisedMixin` for what is reported and when.
    """


@contextmanager
def offering_child_link(parent: SupervisedMixin, child_id: str) -> Iterator[_LinkSlot]:
    """Offer a link to ``parent`` itself, for a child it supervises without being a
    supervisor actor (an agent's per-call actors): the child reports its exit to ``parent``,
    and the ancestry of the child's thread runs through ``parent`` up to the root (so a call
    from the child that would wait on its own agent's stop is refused, not deadlocked)."""
    with offering_link(
        parent.actor_ref, child_id, supervisor_link=parent._supervision_link
    ) as slot:
        yield slot


def claim_offered_link(urn: str) -> _LinkSlot | None:
    """Claim the link offered in this block for a child that is not an actor (a job on a
    long-lived worker thread, named ``urn``), as a :class:`SupervisedMixin` would in its
    ``__init__``; None if none is offered or it was claimed already. The child must then
    tell its supervisor :class:`ChildExited` itself, as the last thing it does."""
    slot = _offered_link.get()
    if slot is None or slot.claimed_urn is not None:
        return None
    slot.claimed_urn = urn
    return slot


@contextmanager
def running_linked(link: _LinkSlot | None) -> Iterator[None]:
    """Run the block as the child ``link`` names (its ancestry, for :func:`ancestry_here`),
    restoring the thread's own afterwards (a worker thread runs many children in turn)."""
    previous = getattr(_running, "link", None)
    _running.link = link
    try:
        yield
    finally:
        _running.link = previous
