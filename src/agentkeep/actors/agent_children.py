"""An agent's per-call children (streams, tool calls, compactions), supervised by its actor.

The agent actor starts one child per stream, tool call and compaction
(:mod:`agentkeep.actors.children`) and is their supervisor:

- Every child is linked to its agent when constructed and reports its exit (``ChildExited``)
  as the last thing its thread does. A child that died without its terminal report (a
  failure escaped its work) is answered for here, so the loop never waits for a report that
  cannot come: a tool call gets an error result, a stream a failed ``done``, a compaction a
  failed outcome.
- An aborted tool call is answered at once (the loop does that); its thread gets
  ``grace_seconds`` to notice the cancellation and unwind, and the next provider request
  waits for it meanwhile. Past the grace it is *abandoned*: the loop is told it
  stopped, so a tool that ignores cancellation cannot wedge its agent; it leaves pykka's
  registry; whatever it reports later is discarded and logged.
- When the agent stops (passivation, delete, close) or crashes, every child is cancelled and
  stopped and waited for, ``grace_seconds`` in all; the rest are abandoned. So a restarted
  agent never runs beside the children of its previous incarnation that honour cancellation,
  a stopping agent never waits on one that does not, and no child is left in pykka's
  registry after its agent.

An abandoned thread cannot be killed (Python has no way to), but it can no longer change
anything durable through the runtime: its report goes nowhere, its call store expired with
its cancellation (``ToolRunner``), and once the system is closed its store refuses every use.

Reports carry the child's actor urn (:class:`~agentkeep.actors.children.ChildReport`): a child
started again for the same call (a batch resumed after a commit's outcome was unknown) never
has its report taken for an older run's, and vice versa.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

import pykka

from agentkeep.actors.children import ChildReport
from agentkeep.actors.supervision.supervised import (
    ChildExited,
    SupervisedMixin,
    offering_child_link,
    tell_quietly,
)
from agentkeep.logs import get_logger
from agentkeep.loop.events import (
    ChildStopped,
    CompactionFinished,
    Event,
    StreamEventArrived,
    ToolFinished,
)
from agentkeep.providers.protocol import CancelToken
from agentkeep.types import (
    CompactionFailed,
    Done,
    TextBlock,
    ToolResultMessage,
    done_error,
)

log = get_logger(__name__)

ChildKind = Literal["inference", "tool", "compaction"]

# The default grace of a cancelled child: long enough for a tool or stream that checks its
# cancel token to return, short enough that one that ignores it holds nobody up for long.
CHILD_GRACE_SECONDS = 1.0


class StopSignal(Protocol):
    """How a child's end is seen: a ``threading.Event`` (an actor's) or a ``Latch`` (a stream's)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class ChildRef(Protocol):
    """What an agent keeps of a child: a pykka actor ref, or a stream on the agent's
    inference worker (``actors.inference_worker.StreamJob``)."""

    actor_urn: str  # the child incarnation's name (its reports carry it)

    @property
    def actor_stopped(self) -> StopSignal:
        """Set once the child's work has returned."""
        ...

    def stop(self, *, block: bool = True, timeout: float | None = None) -> Any:
        """Ask the child to stop (after its work returns)."""
        ...


@dataclass(frozen=True)
class GraceExpired:
    """Told to the agent by a timer: a cancelled child's grace to unwind has passed."""

    actor_urn: str


@dataclass(eq=False, kw_only=True)
class _Child:
    child_id: str
    kind: ChildKind
    ref: ChildRef
    token: CancelToken
    call_id: str = ""  # a tool call: the provider's call id
    tool: str = ""  # a tool call: the tool's name
    done_seen: bool = False  # a stream: its terminal ``done`` reached the loop
    reported: bool = False  # its terminal report reached the loop
    superseded: bool = False  # a newer child runs for the same id: its reports are stale
    abandoned: bool = False  # given up on: out of pykka's registry, never waited for
    timer: threading.Timer | None = None


class AgentChildren:
    """The children of one agent actor incarnation. Used only in that actor's thread."""

    def __init__(self, agent: SupervisedMixin, agent_id: str, *, grace_seconds: float) -> None:
        self._agent = agent
        self._agent_id = agent_id
        self._grace_seconds = grace_seconds
        self._children: dict[str, _Child] = {}  # by actor urn, until its thread ended
        self._current: dict[str, _Child] = {}  # by child id: the one whose reports count

    def start(
        self,
        child_id: str,
        kind: ChildKind,
        run: Callable[[CancelToken], ChildRef],
        *,
        call_id: str = "",
        tool: str = "",
    ) -> None:
        """Start a child by ``run(token)``, linked to this agent, with a fresh cancel token.

        ``run`` must construct exactly one child (the first constructed claims the link).
        Its reports cannot be taken before it is entered here: they arrive in this thread.
        """
        token = CancelToken()
        with offering_child_link(self._agent, child_id):
            ref = run(token)
        child = _Child(
            child_id=child_id, kind=kind, ref=ref, token=token, call_id=call_id, tool=tool
        )
        older = self._current.get(child_id)
        if older is not None:
            older.superseded = True  # cancelled already; it runs on unobserved
        self._current[child_id] = child
        self._children[ref.actor_urn] = child

    def cancel(self, child_id: str, *, abandon_after_grace: bool = False) -> None:
        """Cancel a child; with ``abandon_after_grace``, abandon it if it has not reported
        when the grace has passed (see :meth:`grace_expired`)."""
        child = self._current.get(child_id)
        if child is None:
            return
        child.token.cancel()
        if abandon_after_grace and not child.reported and child.timer is None:
            expired = GraceExpired(actor_urn=child.ref.actor_urn)
            timer = threading.Timer(
                self._grace_seconds, tell_quietly, (self._agent.actor_ref, expired)
            )
            timer.daemon = True  # a pending grace never keeps the process alive
            child.timer = timer
            timer.start()

    def admit(self, report: ChildReport) -> bool:
        """Whether a child's report goes on to the loop. A report of an abandoned or
        superseded child is discarded (and logged): the loop answered for it already."""
        child = self._children.get(report.actor_urn)
        if child is None or child.abandoned or child.superseded:
            self._discard(report, child)
            return False
        match report.event:
            case StreamEventArrived(event=Done()):
                child.done_seen = True
            case StreamEventArrived():
                pass
            case ToolFinished():
                child.reported = True
                if child.token.cancelled:
                    log.debug("tool_call_cancelled_result_discarded", **self._names(child))
            case _:
                child.reported = True
        return True

    def exited(self, message: ChildExited) -> list[Event]:
        """A child's thread ended. If it ended without its terminal report, the events that
        answer for it (a lost report must never leave the loop waiting)."""
        child = self._children.pop(message.actor_urn, None)
        if child is None:
            return []
        if child.timer is not None:
            child.timer.cancel()
        if self._current.get(child.child_id) is child:
            del self._current[child.child_id]
        if child.abandoned or child.reported or child.superseded:
            return []
        failure = message.failure
        reason = "it stopped without reporting" if failure is None else str(failure)
        reason = reason or type(failure).__name__
        log.warning("agent_child_lost", kind=child.kind, error=repr(failure), **self._names(child))
        return _answers_for(child, reason)

    def grace_expired(self, expired: GraceExpired) -> list[Event]:
        """A cancelled child's grace passed: if it still has not reported, abandon it and
        tell the loop it stopped (so the next request does not wait for it)."""
        child = self._children.get(expired.actor_urn)
        if child is None or child.reported or child.abandoned:
            return []
        self._abandon(child, "it ignored its cancellation")
        if child.superseded:
            return []  # the loop waits for its successor, not for it
        return [ChildStopped(child_id=child.child_id)]

    def stop_all(self, reason: str) -> None:
        """Cancel and stop every child and wait for them, ``grace_seconds`` in all; abandon
        those still running then. Called as the agent stops or crashes."""
        children = list(self._children.values())
        self._children.clear()
        self._current.clear()
        for child in children:
            if child.timer is not None:
                child.timer.cancel()
            child.token.cancel(reason)
        live = [c for c in children if not c.abandoned]
        for child in live:
            with suppress(pykka.ActorDeadError):
                child.ref.stop(block=False)  # taken once its work returns
        deadline = time.monotonic() + self._grace_seconds
        for child in live:
            remaining = max(0.0, deadline - time.monotonic())
            if not child.ref.actor_stopped.wait(remaining):
                self._abandon(child, f"it did not stop with its agent ({reason})")

    # -- helpers ---------------------------------------------------------------------------

    def _abandon(self, child: _Child, why: str) -> None:
        child.abandoned = True
        # Out of pykka's registry: nothing (ActorRegistry.stop_all included) waits on it.
        # (A stream on the inference worker was never registered: nothing to remove.)
        pykka.ActorRegistry.unregister(cast(Any, child.ref))
        log.warning(
            "agent_child_abandoned",
            kind=child.kind,
            why=why,
            grace_seconds=self._grace_seconds,
            **self._names(child),
        )

    def _discard(self, report: ChildReport, child: _Child | None) -> None:
        names = {"agent_id": self._agent_id} if child is None else self._names(child)
        if child is not None and child.superseded and not child.abandoned:
            log.debug("agent_child_stale_report_discarded", **names)
        elif isinstance(report.event, ToolFinished):
            log.warning("tool_call_late_result_discarded", **names)
        else:
            log.warning(
                "agent_child_late_report_discarded", report=type(report.event).__name__, **names
            )

    def _names(self, child: _Child) -> dict[str, str]:
        names = {"agent_id": self._agent_id, "child_id": child.child_id}
        if child.kind == "tool":
            names |= {"call_id": child.call_id, "tool": child.tool}
        return names


def _answers_for(child: _Child, reason: str) -> list[Event]:
    child_id = child.child_id
    match child.kind:
        case "tool":
            text = f"The tool call failed: {reason}"
            result = ToolResultMessage(
                call_id=child.call_id, content=(TextBlock(text=text),), is_error=True
            )
            return [ToolFinished(internal_id=child_id, result=result)]
        case "inference":
            failed = done_error(f"The provider failed: {reason}")
            done = (
                [] if child.done_seen else [StreamEventArrived(inference_id=child_id, event=failed)]
            )
            return [*done, ChildStopped(child_id=child_id)]
        case "compaction":
            outcome = CompactionFailed(kind="inference_error", message=reason)
            return [CompactionFinished(compaction_id=child_id, outcome=outcome)]
