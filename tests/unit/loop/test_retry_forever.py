"""``retry_forever`` (docs/decisions.md): failures retry with bounded backoff; only
abort, close, shutdown and removing the provider stop it. The default still gives up
(docs/decisions.md)."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.loop.context import RetryPolicy
from agentkeep.loop.effects import CancelTimer, LoadState, LoopStopped, StartTimer
from agentkeep.loop.events import (
    AbortRequested,
    CommitFailed,
    HookFinished,
    Loaded,
    LoadFailed,
    ShutdownRequested,
    TimerFired,
    WorkAccepted,
)
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.plans import Snapshot
from agentkeep.providers import script
from agentkeep.types import Done, ReasoningEnd, ReasoningStart, Settings, StreamEvent
from agentkeep.types.records import QueuedMessage

from .conftest import World, counting_tool, roles, text_of

FAST = {"retry_forever": True, "retry_initial_seconds": 0.01, "retry_max_seconds": 0.02}
# A backoff no test waits out: anything that ends it early did so by cancelling it.
SLOW = {"retry_forever": True, "retry_initial_seconds": 60.0, "retry_max_seconds": 60.0}


class ErrorSeen(ak.Feature):
    """Sets ``failed`` at the first ``done{error}`` the loop hands on (its backoff is the
    next effect of the same event, carried out before the actor takes another message)."""

    name = "error-seen"

    def __init__(self) -> None:
        self.failed = threading.Event()

    def on_event(self, ctx: ak.HookContext, event: StreamEvent) -> None:
        if isinstance(event, Done) and event.state == "error":
            self.failed.set()


def test_a_provider_failing_more_than_three_times_is_retried_until_it_answers(
    world: World,
) -> None:
    world.model.add(*(script.error("overloaded") for _ in range(5)), script.text("finally"))
    system = world.open(**FAST)
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)

    assert len(world.model.requests) == 6  # five failures, then the answer
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant"]  # no failure note while retrying
    assert text_of(transcript[-1]) == "finally"
    assert agent.state == "idle"


def test_without_retry_forever_a_provider_error_still_fails_the_turn(world: World) -> None:
    world.model.add(*(script.error("overloaded", "Overloaded.") for _ in range(5)))
    world.model.add(script.text("finally"))
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)

    assert len(world.model.requests) == 1
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "system"]
    assert text_of(transcript[-1]) == "The last turn failed: Overloaded."
    assert agent.state == "owes_work"


def test_committed_tool_effects_are_not_replayed_while_retrying(world: World) -> None:
    runs: list[str] = []
    world.model.add(
        script.tool_call("count", {"text": "once"}),
        *(script.error("overloaded") for _ in range(4)),
        script.text("done"),
    )
    system = world.open(tools=[counting_tool(runs)], **FAST)
    agent = system.create()
    agent.send(ak.user("go"))
    agent.wait_for_idle(timeout_seconds=10)

    assert runs == ["once"]
    assert len(world.model.requests) == 6
    assert roles(agent.transcript()) == ["user", "assistant", "tool", "assistant"]


def test_a_failing_compaction_is_retried_until_it_succeeds(world: World) -> None:
    world.model.add(script.text("a1"))
    world.model.add_compactions(
        script.compaction_failed("not now"),
        script.compaction_failed("not yet"),
        script.compacted(ak.user("summary")),
    )
    system = world.open(**FAST)
    agent = system.create()
    agent.send(ak.user("q1"))
    agent.wait_for_idle(timeout_seconds=10)

    agent.compact(wait=True, timeout_seconds=10)  # no CompactionFailedError: it was retried
    agent.wait_for_idle(timeout_seconds=10)

    assert len(world.model.compactions) == 3
    assert [text_of(m) for m in agent.transcript()] == ["summary"]


def test_an_abort_during_the_backoff_stops_the_retrying_at_once(world: World) -> None:
    seen = ErrorSeen()
    world.model.add(script.error("overloaded"), script.text("never asked"))
    system = world.open(features=[seen], **SLOW)
    agent = system.create()
    agent.send(ak.user("go"))
    assert seen.failed.wait(10)

    started = time.monotonic()
    agent.abort(wait=True, timeout_seconds=10)
    agent.wait_for_idle(timeout_seconds=10)

    assert time.monotonic() - started < 10  # not the 60 s backoff
    assert len(world.model.requests) == 1
    assert agent.state == "idle"
    assert "system" not in roles(agent.transcript())


def test_close_during_the_backoff_returns_promptly_and_the_work_stays_owed(
    world: World,
) -> None:
    seen = ErrorSeen()
    world.model.add(script.error("overloaded"))
    system = world.open(features=[seen], **SLOW)
    agent = system.create()
    agent_id = agent.id
    agent.send(ak.user("go"))
    assert seen.failed.wait(10)

    started = time.monotonic()
    system.close(timeout_seconds=30)
    assert time.monotonic() - started < 10  # close did not wait out the backoff (or 30 s)

    world.model.add(script.text("answered after reopening"))
    reopened = world.open()
    again = reopened.resolve(agent_id)  # open resumed it: only agents that owe work resume
    assert world.model.wait_for_requests(2, timeout_seconds=10)
    again.wait_for_idle(timeout_seconds=10)
    transcript = again.transcript()
    assert roles(transcript) == ["user", "assistant"]  # no failure note was left
    assert text_of(transcript[-1]) == "answered after reopening"


def test_a_response_cut_by_its_failure_is_continued_after_a_restart_during_the_backoff(
    world: World,
) -> None:
    """A response whose reasoning block finished right before its stream failed (the block
    lands with the response's end) was cut short, not answered: closed during the backoff
    and reopened, the agent continues it (C2) — it does not settle over the reasoning."""
    seen = ErrorSeen()
    world.model.add(
        script.error(
            "overloaded",
            before=[ReasoningStart(), ReasoningEnd(text="thinking", reasoning="sig-1")],
        )
    )
    system = world.open(features=[seen], **SLOW)
    agent = system.create()
    agent_id = agent.id
    agent.send(ak.user("go"))
    assert seen.failed.wait(10)
    system.close(timeout_seconds=30)

    world.model.add(script.text("answered after reopening"))
    reopened = world.open()
    again = reopened.resolve(agent_id)
    assert world.model.wait_for_requests(2, timeout_seconds=10), "the cut response was settled"
    again.wait_for_idle(timeout_seconds=10)
    continued = world.model.requests[1].context.messages
    assert text_of(continued[-1]) == "Continue from where you left off."
    transcript = again.transcript()
    # the reasoning, the durable continue notice, then the answer that continued it
    assert roles(transcript) == ["user", "assistant", "system", "assistant"]
    assert text_of(transcript[-1]) == "answered after reopening"


def test_removing_the_provider_during_the_backoff_gives_up_and_stays_resumable(
    world: World,
) -> None:
    seen = ErrorSeen()
    providers = ak.Providers()
    providers.add("local", world.model, kind="gym")
    world.model.add(script.error("overloaded"))
    system = world.open(providers=providers, features=[seen], **SLOW)
    agent = system.create()
    agent.send(ak.user("go"))
    assert seen.failed.wait(10)

    started = time.monotonic()
    assert providers.remove("local")  # provider disablement, while it waits to retry
    assert agent.wait_for_idle(timeout_seconds=10)

    assert time.monotonic() - started < 10  # not the 60 s backoff
    assert len(world.model.requests) == 1  # nothing reached the removed provider again
    # The give-up path of a run without retry_forever: a note, the work still owed.
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "system"]
    assert text_of(transcript[-1]) == 'The last turn failed: Provider "local" is not registered.'
    assert agent.state == "owes_work"

    # Added back, the next run (the reopened system resumes the owed work) retries forever
    # again and answers.
    world.model.add(script.error("overloaded"), script.text("answered"))
    providers.add("local", world.model, kind="gym")
    system.close(timeout_seconds=10)
    reopened = world.open(providers=providers, **FAST)
    again = reopened.resolve(agent.id)  # open resumed it: it owes work
    assert world.model.wait_for_requests(3, timeout_seconds=10)
    assert again.wait_for_idle(timeout_seconds=10)
    transcript = again.transcript()
    assert roles(transcript) == ["user", "system", "assistant"]
    assert text_of(transcript[-1]) == "answered"


def test_a_run_that_finds_its_provider_removed_gives_up_instead_of_retrying(
    world: World,
) -> None:
    providers = ak.Providers()
    providers.add("local", world.model, kind="gym")
    world.model.add(script.text("a1"))
    system = world.open(providers=providers, **FAST)
    agent = system.create()
    agent.send(ak.user("q1"))
    assert agent.wait_for_idle(timeout_seconds=10)
    providers.remove("local")  # while no run is under way: the next request finds it gone

    agent.send(ak.user("q2"))
    assert agent.wait_for_idle(timeout_seconds=10)

    assert len(world.model.requests) == 1
    transcript = agent.transcript()
    assert roles(transcript) == ["user", "assistant", "user", "system"]
    assert text_of(transcript[-1]) == 'The last turn failed: Provider "local" is not registered.'
    assert agent.state == "owes_work"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"retry_initial_seconds": 0}, "retry_initial_seconds"),
        ({"retry_max_seconds": -1.0}, "retry_max_seconds"),
        ({"retry_initial_seconds": float("inf")}, "retry_initial_seconds"),
        ({"retry_initial_seconds": "0.1"}, "retry_initial_seconds"),
        ({"retry_initial_seconds": 2.0, "retry_max_seconds": 1.0}, "retry_max_seconds"),
        ({"retry_forever": "yes"}, "retry_forever"),
    ],
)
def test_a_bad_retry_backoff_is_refused_naming_it(
    world: World, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(ak.InvalidConfigError, match=named):
        world.open(**options)


# -- the pure core: run-stage failures, event by event ------------------------------------

MESSAGE = QueuedMessage(id="m1", queue="send", message=ak.user("hi"), seq=1)


def retrying_loop() -> AgentLoop:
    counter = itertools.count()
    return AgentLoop(
        "agent",
        new_id=lambda: f"id{next(counter)}",
        defaults=Settings(provider="local", model="gym-1"),
        retry=RetryPolicy(initial_seconds=0.1, max_seconds=0.15),
    )


def test_a_failed_load_is_retried_with_capped_backoff_until_shutdown_keeps_it_owed() -> None:
    loop = retrying_loop()
    loop.handle(WorkAccepted(message=MESSAGE))
    delays = []
    for _ in range(3):
        (timer,) = loop.handle(LoadFailed(message="disk"))
        assert isinstance(timer, StartTimer)
        delays.append(timer.seconds)
        assert loop.running  # the run (and its turn) goes on through the wait
        assert loop.handle(TimerFired(timer_id="stale")) == []  # not this wait's tick
        assert isinstance(loop.handle(TimerFired(timer_id=timer.timer_id))[0], LoadState)
    assert delays == [0.1, 0.15, 0.15]  # doubling, capped

    (timer,) = loop.handle(LoadFailed(message="disk"))
    effects = loop.handle(ShutdownRequested())
    assert effects[0] == CancelTimer(timer_id=timer.timer_id)
    loop.handle(HookFinished(hook="after_turn"))
    assert loop.handle(HookFinished(hook="after_agent_loop")) == [
        LoopStopped(settled=False, error=None)
    ]


def test_an_abort_during_a_load_backoff_never_settles_unread_state() -> None:
    loop = retrying_loop()
    loop.handle(WorkAccepted(message=MESSAGE))
    (timer,) = loop.handle(LoadFailed(message="disk"))
    effects = loop.handle(AbortRequested())
    assert effects[0] == CancelTimer(timer_id=timer.timer_id)
    loop.handle(HookFinished(hook="after_turn"))
    stopped = loop.handle(HookFinished(hook="after_agent_loop"))
    assert stopped == [LoopStopped(settled=False, error=None)]


def test_a_refused_commit_is_retried_from_the_durable_state_without_a_note() -> None:
    loop = retrying_loop()
    loop.handle(WorkAccepted(message=MESSAGE))
    loop.handle(Loaded(snapshot=Snapshot(queued=(MESSAGE,))))
    (consume,) = loop.handle(HookFinished(hook="before_turn"))
    plan = consume.plan  # type: ignore[attr-defined]

    (timer,) = loop.handle(CommitFailed(plan=plan, message="disk full"))
    assert isinstance(timer, StartTimer)  # no AppendFailureNote, no stop
    assert loop.handle(TimerFired(timer_id=timer.timer_id)) == [LoadState(records=True)]
