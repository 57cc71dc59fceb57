"""An agent's long-lived inference worker: one thread per agent actor incarnation that runs
its provider streams one after the other (a one-shot pykka actor per response cost
a thread and an actor start on every step).

Each stream is a child of the agent exactly as a one-shot actor was (see
:mod:`agentkeep.actors.agent_children`): it claims the link its agent offers, reports its events
(each a ``ChildReport`` with its own urn, to the agent) and, as the last thing it does, tells
``ChildExited`` — with the failure that ended it if anything escaped the stream. Its handle
(:class:`StreamJob`) has the parts of an actor ref the agent uses: the urn, ``actor_stopped``,
``stop``.

Reports are coalesced (a response's events and its exit were one mailbox message
each, six per step): a report — and last, the exit — goes into the job's outbox, and only the
one that finds the outbox empty tells the agent :class:`StreamReports`; the agent then takes
everything queued by that time, in order, each as if it had come as a message of its own.
Nothing is reordered: what one job queued is taken in the order queued, and it is taken no
later than it would have been as separate messages.

Why one thread is enough: the loop starts a response only once every earlier stream has told
``ChildStopped``, which a job tells right before its exit report, so a new job
never waits behind a running one. A stream that ignores its cancellation as its agent stops is
abandoned with the worker (a daemon thread): the next incarnation has a worker of its own.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pykka
from opentelemetry import context as otel_context

from agentkeep.actors.children import ChildReport, stream_response
from agentkeep.actors.latch import Latch
from agentkeep.actors.supervision.supervised import (
    ChildExited,
    claim_offered_link,
    running_linked,
    tell_quietly,
)
from agentkeep.logs import get_logger
from agentkeep.loop.events import Event
from agentkeep.metrics import ProviderMeter
from agentkeep.providers.protocol import CancelToken, ModelSession
from agentkeep.tracing import current
from agentkeep.types import Context, Selection, new_id

log = get_logger(__name__)

# The streams whose work has not returned, in every worker of the process (diagnostics: what
# pykka's registry lists for actor children).
_running: set[StreamJob] = set()
_running_lock = threading.Lock()


def running_streams() -> list[StreamJob]:
    """The streams of every agent whose work has not returned yet (a stopped agent's are
    gone unless abandoned: they ignored their cancellation)."""
    with _running_lock:
        return list(_running)


class StreamJob:
    """One stream on the worker, as its agent's children see it (an actor ref's parts)."""

    def __init__(self) -> None:
        self.actor_urn = f"urn:agentkeep:stream:{new_id()}"
        self.actor_stopped = Latch()  # set when the stream's work has returned (by the worker)
        # Reports (and, last, the exit) not yet taken by the agent; non-empty exactly while
        # a StreamReports for them is on its way (the push that found it empty told one).
        self._outbox: list[ChildReport | ChildExited] = []
        self._outbox_lock = threading.Lock()

    def push(self, message: ChildReport | ChildExited) -> bool:
        """Queue a message for the agent; True if the agent must be told (:class:`StreamReports`):
        the outbox was empty, so no message for it is on its way."""
        with self._outbox_lock:
            self._outbox.append(message)
            return len(self._outbox) == 1

    def take_reports(self) -> list[ChildReport | ChildExited]:
        """Every message queued so far, oldest first (the agent's thread, on StreamReports)."""
        with self._outbox_lock:
            reports, self._outbox = self._outbox, []
            return reports

    def stop(self, *, block: bool = True, timeout: float | None = None) -> None:
        """A stream ends when its cancel token is cancelled (its agent cancels it first);
        with ``block``, wait up to ``timeout`` for that."""
        if block:
            self.actor_stopped.wait(timeout)

    def is_alive(self) -> bool:
        """Whether the stream's work has not returned yet."""
        return not self.actor_stopped.is_set()


@dataclass(frozen=True, slots=True)
class StreamReports:
    """The agent's mailbox message: ``job`` has reports queued (take them all, in order)."""

    job: StreamJob


class InferenceWorker:
    """The thread that runs one agent incarnation's streams. Used from that agent's thread
    (``start``, ``close``); the thread itself is started with the first stream.

    Args:
        agent_id: The agent whose streams it runs (names the thread).
    """

    def __init__(self, agent_id: str) -> None:
        self._agent_id = agent_id
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(
        self,
        parent: pykka.ActorRef[Any],
        inference_id: str,
        session: ModelSession,
        context: Context,
        selection: Selection,
        cancel: CancelToken,
        trace_context: otel_context.Context | None = None,
        *,
        meter: ProviderMeter | None = None,
    ) -> StreamJob:
        """Queue a stream for the worker; call it inside the link the agent offers for the
        child (``AgentChildren.start``), which the stream claims now. ``trace_context``: the
        request's span, current on the worker while it streams (the provider's own spans,
        an instrumented HTTP client's, nest under it). ``meter`` counts the stream's retries
        and its error ending (the system's metrics)."""
        job = StreamJob()
        link = claim_offered_link(job.actor_urn)
        with _running_lock:
            _running.add(job)

        def post(message: ChildReport | ChildExited) -> None:
            if not job.push(message):
                return  # the agent is told already: it takes this one with the others
            try:
                parent.tell(StreamReports(job=job))
            except pykka.ActorDeadError:
                log.debug("agent_child_result_unheard", child="stream")

        def tell(event: Event) -> None:
            post(ChildReport(actor_urn=job.actor_urn, event=event))

        def run() -> None:
            failure: BaseException | None = None
            try:
                with running_linked(link), current(trace_context):
                    stream_response(
                        tell, inference_id, session, context, selection, cancel, meter=meter
                    )
            except BaseException as error:  # reported in ChildExited; the worker goes on
                log.warning("agent_child_failed", child="stream", error=repr(error))
                failure = error
            finally:
                with _running_lock:
                    _running.discard(job)
                job.actor_stopped.set()
                if link is not None:  # the last thing the child does, as an actor's would
                    exited = ChildExited(
                        child_id=link.child_id, actor_urn=job.actor_urn, failure=failure
                    )
                    if link.supervisor.actor_urn == parent.actor_urn:
                        post(exited)  # after its reports, in the same outbox
                    else:
                        tell_quietly(link.supervisor, exited)

        self._jobs.put(run)
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name=f"agentkeep-inference-{self._agent_id}", daemon=True
            )
            self._thread.start()
        return job

    def close(self) -> None:
        """Let the thread end once the streams queued before have run (its agent stopped)."""
        if self._thread is not None:
            self._jobs.put(None)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()
