"""A tool that ignores cancellation cannot wedge its agent (invariants I24
and I20). The order for a tool that does unwind within the grace is
kept: test_lifecycle_concurrency.py::test_the_next_inference_waits_for_an_aborted_tool_to_unwind.

After ``abort`` the running call is answered as aborted at once; the thread that ignores the
cancellation gets a short grace (``CHILD_GRACE_SECONDS``) and is then abandoned, so the next
message is answered while it is still blocked. What it returns later is discarded and logged,
it can no longer write its call store, and ``close`` does not wait for it.

Threads are ordered with events and joins, never with sleeps. The only timing figures are
generous ceilings (``FAST``), far above the grace, far below the old 30 s wait.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pykka
import pytest
from structlog.testing import capture_logs

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import Context

from .conftest import EchoArgs, World, text_of

pytestmark = pytest.mark.timeout(60)

TIMEOUT = 10.0
FAST = 5.0  # a ceiling, not a measurement: the old code took the close timeout (30 s)
BLOCKED = 45.0  # how long the stray tool would block: longer than any wait of the test
ABORTED = "The tool call was aborted."


def answer_last(context: Context) -> script.ScriptedResponse:
    return script.text(f"answer {text_of(context.messages[-1])}")


class Stubborn:
    """A tool that blocks until the test lets it go, whatever its cancel token says, then
    tries to write its call store."""

    def __init__(self, world: World) -> None:
        self.entered = threading.Event()
        self.release = world.gate("stubborn").release  # the fixture lets it go at the end
        self.thread: threading.Thread | None = None
        self.prefix = ""
        self.cancelled_when_released: bool | None = None
        self.late_write: list[BaseException | None] = []

    def tool(self) -> ak.Tool[Any, Any]:
        @ak.tool
        def stubborn(ctx: ak.ToolContext, args: EchoArgs) -> str:
            """Ignore cancellation; return only when the test says so."""
            self.thread = threading.current_thread()
            self.prefix = ctx.kv.prefix
            ctx.kv.write("early", "before the abort")
            self.entered.set()
            assert self.release.wait(BLOCKED)
            self.cancelled_when_released = ctx.cancel.cancelled
            try:
                ctx.kv.write("late", "must never land")
                self.late_write.append(None)
            except Exception as error:
                self.late_write.append(error)
            return "too late"

        return stubborn

    def blocked(self) -> bool:
        """Whether its thread still runs (it has not been let go)."""
        return self.thread is not None and self.thread.is_alive()

    def finish(self) -> None:
        """Let it go and wait until its thread (the call's child actor) has ended, so all
        it told its agent is in the agent's mailbox."""
        self.release.set()
        assert self.thread is not None
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive()


_BEFORE: set[str] = set()


@pytest.fixture(autouse=True)
def _children_of_earlier_tests() -> None:
    """Child actors some earlier test in this process left behind are not this test's."""
    _BEFORE.clear()
    _BEFORE.update(r.actor_urn for r in _all_child_actors())


def _all_child_actors() -> list[pykka.ActorRef[Any]]:
    refs = pykka.ActorRegistry.get_all()
    return [r for r in refs if r.actor_class.__module__ == "agentkeep.actors.children"]


def child_actors() -> list[pykka.ActorRef[Any]]:
    """The per-call child actors (streams, tool calls, compactions) of this test that pykka
    still lists."""
    return [r for r in _all_child_actors() if r.actor_urn not in _BEFORE]


class LateObserver(ak.Feature):
    """Writes its call store when it observes a call's outcome (in the call's thread)."""

    name = "late-observer"

    def __init__(self) -> None:
        self.writes: list[BaseException | None] = []

    def after_tool_call(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: ak.ToolCallResult
    ) -> None:
        assert ctx.call_kv is not None
        try:
            ctx.call_kv.write("seen", "the late outcome")
            self.writes.append(None)
        except Exception as error:
            self.writes.append(error)


def texts(agent: ak.Agent) -> list[str]:
    return [text_of(m) for m in agent.transcript()]


def test_an_aborted_tool_that_ignores_cancellation_does_not_hold_up_the_next_message(
    world: World,
) -> None:
    stubborn = Stubborn(world)
    observer = LateObserver()
    world.model.add(script.tool_call("stubborn", {}), answer_last, answer_last)
    system = world.open(tools=[stubborn.tool()], features=[observer])
    agent = system.create(id="wedge")
    with capture_logs() as logs:
        agent.send(ak.user("q1"))
        assert stubborn.entered.wait(TIMEOUT)
        agent.abort(wait=True, timeout_seconds=TIMEOUT)
        # Answered as aborted, durably, without waiting for the tool.
        assert texts(agent) == ["q1", "", ABORTED]

        agent.send(ak.user("q2"))
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
        assert not stubborn.release.is_set()  # the tool thread is still blocked
        assert stubborn.blocked()
        after_q2 = ["q1", "", ABORTED, "q2", "answer q2"]
        assert texts(agent) == after_q2
        assert child_actors() == []  # abandoned: out of pykka's registry

        stubborn.finish()
        agent.send(ak.user("q3"))  # taken after the late result (same mailbox, FIFO)
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)

    # The late result is discarded: nothing of it reaches the transcript or the call store.
    assert texts(agent) == [*after_q2, "q3", "answer q3"]
    assert stubborn.cancelled_when_released is True
    (error,) = stubborn.late_write
    assert isinstance(error, ak.ExpiredScopeError), error
    (error,) = observer.writes  # a hook observing the late outcome cannot write either
    assert isinstance(error, ak.ExpiredScopeError), error
    abandoned = [e for e in logs if e["event"] == "agent_child_abandoned"]
    assert [(e["agent_id"], e["tool"], e["kind"]) for e in abandoned] == [
        ("wedge", "stubborn", "tool")
    ]
    (late,) = [e for e in logs if e["event"] == "tool_call_late_result_discarded"]
    assert (late["agent_id"], late["tool"], late["log_level"]) == ("wedge", "stubborn", "warning")
    assert late["call_id"] == abandoned[0]["call_id"] != ""


def test_close_does_not_wait_for_a_stray_tool_and_it_writes_nothing_after(
    world: World,
) -> None:
    stubborn = Stubborn(world)
    world.model.add(script.tool_call("stubborn", {}), answer_last)
    system = world.open(tools=[stubborn.tool()])
    agent = system.create(id="stray")
    agent.send(ak.user("q1"))
    assert stubborn.entered.wait(TIMEOUT)
    agent.abort(wait=True, timeout_seconds=TIMEOUT)
    agent.send(ak.user("q2"))  # admitted: close answers it first, without the stray tool

    started = time.monotonic()
    system.close()  # the default timeout (30 s) is what the old code waited
    assert time.monotonic() - started < FAST
    assert stubborn.blocked()
    assert child_actors() == []

    stubborn.finish()  # the stray thread returns after close: its result goes nowhere
    (error,) = stubborn.late_write
    assert isinstance(error, ak.ExpiredScopeError | ak.StoreClosedError), error
    reopened = world.open(resume=False)  # nothing landed behind the close
    # The call's store ended with its (aborted) answer; the late write did not revive it.
    assert reopened.internals.store.read(lambda tx: tx.kv.scan(stubborn.prefix)) == []
    transcript = [text_of(m) for m in reopened.transcript("stray")]
    assert transcript == ["q1", "", ABORTED, "q2", "answer q2"]
