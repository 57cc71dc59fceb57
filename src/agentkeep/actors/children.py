"""An agent actor's children: one runs a tool call, one compacts; and how a response streams.

A response streams on a pooled worker thread (:mod:`agentkeep.actors.inference_worker`),
which runs :func:`stream_response`. Each child here is a one-shot pykka actor: it does its one
slow thing in its own thread and tells the parent every outcome as a message, so the agent's
mailbox is never blocked on a provider or a tool and ``abort``/``steer`` are always handled
promptly. A child never raises into its parent: a failing provider is a failed response, a
failing tool an error result.

Each child is supervised by the agent actor that started it (see
:mod:`agentkeep.actors.agent_children`): it is linked to its agent when constructed and tells
it :class:`~agentkeep.actors.supervision.supervised.ChildExited` as the last thing its thread
does, with the failure that ended it if anything escaped its work. So a child that dies
without its terminal report is never lost: the agent answers for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka

from agentkeep.actors.supervision.supervised import SupervisedMixin
from agentkeep.logs import get_logger
from agentkeep.loop.events import (
    ChildStopped,
    CompactionFinished,
    Event,
    StreamEventArrived,
    ToolFinished,
)
from agentkeep.metrics import ProviderMeter
from agentkeep.providers.protocol import CancelToken, ModelSession
from agentkeep.types import (
    CompactionFailed,
    CompactionOutcome,
    Context,
    Done,
    Retrying,
    Selection,
    TextBlock,
    ToolResultMessage,
    done_error,
)

log = get_logger(__name__)

_RUN = object()


@dataclass(frozen=True)
class ChildReport:
    """One report of a child to its agent. ``actor_urn`` names the child incarnation, so a
    report from a child its agent has abandoned or replaced (same call, new run) is
    recognised and never taken for the current one's."""

    actor_urn: str
    event: Event


class OneShotChild(SupervisedMixin, pykka.ThreadingActor):
    """Runs ``_work`` once when told to, then stops itself.

    Children run on daemon threads: a tool or stream that ignores cancellation must never
    keep the process alive after its agent (and system) closed.

    Whatever escapes ``_work`` (a ``BaseException`` included: a provider raising
    ``SystemExit`` must not make pykka stop every actor in the process) ends this child as a
    failure, which its agent hears of in ``ChildExited``.
    """

    use_daemon_thread = True

    def __init__(self, parent: pykka.ActorRef[Any]) -> None:
        super().__init__()
        self._parent = parent

    def on_receive(self, message: Any) -> None:
        if message is _RUN:
            try:
                self._work()
            except BaseException as error:  # reported to the agent in ChildExited
                log.warning("agent_child_failed", child=type(self).__name__, error=repr(error))
                self._record_exit_failure(error)
            finally:
                self.stop()

    def _tell(self, event: Event) -> None:
        """Report to the agent; an agent that stopped meanwhile has disowned this child."""
        try:
            self._parent.tell(ChildReport(actor_urn=self.actor_urn, event=event))
        except pykka.ActorDeadError:
            log.debug("agent_child_result_unheard", child=type(self).__name__)

    def _work(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


def stream_response(
    tell: Callable[[Event], None],
    inference_id: str,
    session: ModelSession,
    context: Context,
    selection: Selection,
    cancel: CancelToken,
    *,
    meter: ProviderMeter | None = None,
) -> None:
    """Stream one response, telling each event; exactly one terminal ``done`` (a stream that
    ends without one, or raises, is reported as a failed response), then ``ChildStopped``
    once the stream is closed. Raises nothing a provider raises. ``meter`` is told each
    ``Retrying`` and the terminal ``done`` (the system's provider metrics)."""
    done: Done | None = None
    stream = None
    try:
        stream = session.stream(context, selection, cancel)
        for event in stream:
            tell(StreamEventArrived(inference_id=inference_id, event=event))
            if isinstance(event, Done):
                done = event
                break
            if meter is not None and isinstance(event, Retrying):
                meter.retried(event)
    except Exception as error:
        log.warning("inference_failed", inference_id=inference_id, error=repr(error))
        if done is None:
            done = done_error(f"The provider failed: {error}")
            tell(StreamEventArrived(inference_id=inference_id, event=done))
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            try:
                close()  # a generator left early is closed before the next request
            except Exception as error:
                log.warning("inference_close_failed", error=repr(error))
    if done is None:
        done = done_error("The response ended without a terminal event.")
        tell(StreamEventArrived(inference_id=inference_id, event=done))
    if meter is not None:
        meter.ended(done)
    tell(ChildStopped(child_id=inference_id))


class ToolCallActor(OneShotChild):
    """Runs one tool call through ``execute`` and tells the parent its result."""

    def __init__(
        self,
        parent: pykka.ActorRef[Any],
        internal_id: str,
        call_id: str,
        execute: Callable[[], ToolResultMessage],
    ) -> None:
        super().__init__(parent)
        self._id = internal_id
        self._call_id = call_id
        self._execute = execute

    def _work(self) -> None:
        try:
            result = self._execute()
        except BaseException as error:  # a tool must never take its agent down
            log.warning("tool_call_failed", call_id=self._id, error=repr(error))
            result = ToolResultMessage(
                call_id=self._call_id,
                content=(TextBlock(text=f"The tool call failed: {error}"),),
                is_error=True,
            )
        self._tell(ToolFinished(internal_id=self._id, result=result))


class CompactionActor(OneShotChild):
    """Asks the model session to compact a context and tells the parent the outcome."""

    def __init__(
        self,
        parent: pykka.ActorRef[Any],
        compaction_id: str,
        session: ModelSession,
        context: Context,
        selection: Selection,
        cancel: CancelToken,
    ) -> None:
        super().__init__(parent)
        self._id = compaction_id
        self._session = session
        self._context = context
        self._selection = selection
        self._cancel = cancel

    def _work(self) -> None:
        outcome: CompactionOutcome
        try:
            outcome = self._session.compact(self._context, self._selection, self._cancel)
        except Exception as error:
            outcome = CompactionFailed(kind="inference_error", message=str(error))
        self._tell(CompactionFinished(compaction_id=self._id, outcome=outcome))


def run_child(actor_class: type[OneShotChild], *args: Any) -> pykka.ActorRef[Any]:
    """Start a one-shot child and tell it to run (link it first: ``AgentChildren.start``)."""
    ref: pykka.ActorRef[Any] = actor_class.start(*args)
    ref.tell(_RUN)
    return ref
