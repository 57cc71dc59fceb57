"""The inference worker coalesces a stream's reports: the events a response queued
while its agent had not yet taken them reach the agent as one mailbox message, in order —
not one message per event."""

from __future__ import annotations

import threading
from typing import Any

import pykka

import agentkeep as ak
from agentkeep.actors.children import ChildReport
from agentkeep.actors.inference_worker import InferenceWorker, StreamJob, StreamReports
from agentkeep.loop.events import ChildStopped, StreamEventArrived
from agentkeep.providers import script
from agentkeep.providers.protocol import CancelToken
from agentkeep.types import Context, Done, ModelSessionOptions, Selection, TextDelta

TIMEOUT = 10.0


class _HeldAgent(pykka.ThreadingActor):
    """Stands where the agent actor stands: records its mailbox, and holds the first
    ``StreamReports`` until ``release`` before it takes the reports."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self._release = release
        self.mailbox: list[Any] = []
        self.taken: list[Any] = []

    def on_receive(self, message: Any) -> Any:
        if message == "report":
            return list(self.mailbox), list(self.taken)
        self.mailbox.append(message)
        if isinstance(message, StreamReports):
            assert self._release.wait(TIMEOUT)
            self.taken.extend(message.job.take_reports())
        return None


def test_a_job_tells_its_agent_once_per_batch_it_has_not_taken() -> None:
    job = StreamJob()
    first = ChildReport(actor_urn=job.actor_urn, event=ChildStopped(child_id="a"))
    second = ChildReport(actor_urn=job.actor_urn, event=ChildStopped(child_id="b"))
    assert job.push(first)  # the outbox was empty: tell the agent
    assert not job.push(second)  # a message is on its way already
    assert job.take_reports() == [first, second]
    assert job.take_reports() == []
    assert job.push(second)  # empty again: the next report is told


def test_a_response_reaches_its_agent_as_one_message_in_order() -> None:
    model = ak.ScriptedModel([script.text("hello")])
    session = model.open_model_session("s", ModelSessionOptions(instructions=""))
    release = threading.Event()
    agent = _HeldAgent.start(release)
    worker = InferenceWorker("agent")
    try:
        context = Context(instructions="", messages=(ak.user("hi"),))
        job = worker.start(agent, "i1", session, context, Selection(model="gym-1"), CancelToken())
        assert job.actor_stopped.wait(TIMEOUT)  # every report is queued
        release.set()
        mailbox, taken = agent.ask("report", timeout=TIMEOUT)
    finally:
        worker.close()
        agent.stop()
    assert mailbox == [StreamReports(job=job)]
    assert all(isinstance(r, ChildReport) and r.actor_urn == job.actor_urn for r in taken)
    events = [r.event for r in taken]
    assert isinstance(events[-1], ChildStopped)
    streamed = [e.event for e in events[:-1] if isinstance(e, StreamEventArrived)]
    assert len(streamed) == len(events) - 1
    assert "".join(e.delta for e in streamed if isinstance(e, TextDelta)) == "hello"
    assert isinstance(streamed[-1], Done)
