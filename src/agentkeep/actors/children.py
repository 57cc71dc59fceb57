"""An agent actor's children: one streams a response, one runs a tool call, one compacts.

Each is a one-shot pykka actor: it does its one slow thing in its own thread and tells the
parent every outcome as a message, so the agent's mailbox is never blocked on a provider or a
tool and ``abort``/``steer`` are always handled promptly. A child never raises into its
parent: a failing provider is a failed response, a failing tool an error result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pykka
import structlog

from agentkeep.loop.messages import (
    ChildStopped,
    CompactionFinished,
    StreamEventArrived,
    ToolFinished,
)
from agentkeep.providers.protocol import CancelToken, Session
from agentkeep.providers.types import (
    CompactionFailed,
    CompactionOutcome,
    Context,
    Done,
    Selection,
    TextBlock,
    ToolResultMessage,
    done_error,
)

log = structlog.get_logger(__name__)

_RUN = object()


class _OneShot(pykka.ThreadingActor):
    """Runs ``_work`` once when told to, then stops itself.

    Children run on daemon threads: a tool or stream that ignores cancellation must never
    keep the process alive after its agent (and system) closed.
    """

    use_daemon_thread = True

    def on_receive(self, message: Any) -> None:
        if message is _RUN:
            try:
                self._work()
            finally:
                self.stop()

    def _work(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class InferenceActor(_OneShot):
    """Streams one response and tells each event to the parent.

    Guarantees the parent sees exactly one terminal ``done`` per response: events after the
    first ``done`` are dropped, a stream that ends without one (or raises) is reported as a
    failed response, then ``ChildStopped`` follows once the stream is closed.
    """

    def __init__(
        self,
        parent: pykka.ActorRef[Any],
        inference_id: str,
        session: Session,
        context: Context,
        selection: Selection,
        cancel: CancelToken,
    ) -> None:
        super().__init__()
        self._parent = parent
        self._id = inference_id
        self._session = session
        self._context = context
        self._selection = selection
        self._cancel = cancel

    def _work(self) -> None:
        done: Done | None = None
        stream = None
        try:
            stream = self._session.stream(self._context, self._selection, self._cancel)
            for event in stream:
                self._parent.tell(StreamEventArrived(inference_id=self._id, event=event))
                if isinstance(event, Done):
                    done = event
                    break
        except Exception as error:
            log.warning("inference_failed", inference_id=self._id, error=repr(error))
            if done is None:
                done = done_error(f"The provider failed: {error}")
                self._parent.tell(StreamEventArrived(inference_id=self._id, event=done))
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                try:
                    close()  # a generator left early is closed before the next request
                except Exception as error:
                    log.warning("inference_close_failed", error=repr(error))
        if done is None:
            event = done_error("The response ended without a terminal event.")
            self._parent.tell(StreamEventArrived(inference_id=self._id, event=event))
        self._parent.tell(ChildStopped(child_id=self._id))


class ToolCallActor(_OneShot):
    """Runs one tool call through ``execute`` and tells the parent its result."""

    def __init__(
        self,
        parent: pykka.ActorRef[Any],
        internal_id: str,
        call_id: str,
        execute: Callable[[], ToolResultMessage],
    ) -> None:
        super().__init__()
        self._parent = parent
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
        self._parent.tell(ToolFinished(internal_id=self._id, result=result))


class CompactionActor(_OneShot):
    """Asks the provider session to compact a context and tells the parent the outcome."""

    def __init__(
        self,
        parent: pykka.ActorRef[Any],
        compaction_id: str,
        session: Session,
        context: Context,
        selection: Selection,
        cancel: CancelToken,
    ) -> None:
        super().__init__()
        self._parent = parent
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
        self._parent.tell(CompactionFinished(compaction_id=self._id, outcome=outcome))


def run_child(actor_class: type[_OneShot], *args: Any) -> pykka.ActorRef[Any]:
    """Start a one-shot child and tell it to run."""
    ref: pykka.ActorRef[Any] = actor_class.start(*args)
    ref.tell(_RUN)
    return ref
