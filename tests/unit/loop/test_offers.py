"""Consume at acceptance, in the pure core (``loop.offers``): what an idle loop offers, and
the run it starts when an acceptance consumed under its offer — no reload, no consumption
commit of its own, the same hooks observed in the same order."""

from __future__ import annotations

import itertools

import agentkeep as ak
from agentkeep.loop.effects import Commit, LoadState, Observe, RunHook, StartInference
from agentkeep.loop.events import (
    AcceptanceOutcomeUnknown,
    CommitLanded,
    ConsumedAtAcceptance,
    HookFinished,
    Loaded,
    Start,
)
from agentkeep.loop.machine import AgentLoop
from agentkeep.loop.plans import Consumed, ConsumeOffer, Settle, Settled, Snapshot
from agentkeep.types import Settings
from agentkeep.types.records import OwedWork, QueuedMessage, UserRecord

DEFAULTS = Settings(provider="local", model="gym-1")


def settled_loop(**options: object) -> AgentLoop:
    """A loop that ran once over an empty conversation and settled: idle, its mirror loaded."""
    counter = itertools.count()
    loop = AgentLoop(
        "agent",
        new_id=lambda: f"id{next(counter)}",
        defaults=DEFAULTS,
        eager_settle=True,
        **options,  # type: ignore[arg-type]
    )
    loop.handle(Start())
    loop.handle(Loaded(snapshot=Snapshot(records=())))
    loop.handle(HookFinished(hook="before_turn"))
    loop.handle(HookFinished(hook="after_turn"))
    effects = loop.handle(HookFinished(hook="after_agent_loop"))
    (settle,) = [e for e in effects if isinstance(e, Commit)]
    assert isinstance(settle.plan, Settle)
    loop.handle(CommitLanded(plan=settle.plan, value=Settled(settled=True)))
    assert not loop.running
    return loop


def consumed(offer: ConsumeOffer, text: str = "hi") -> ConsumedAtAcceptance:
    entry = QueuedMessage(id="m1", queue="send", message=ak.user(text), seq=1)
    record = UserRecord(message_id=entry.id, message=entry.message)
    value = Consumed(records=(record,), settings=offer.settings, remaining=())
    return ConsumedAtAcceptance(plan=offer.plan("send"), value=value)


def test_an_idle_loaded_loop_offers_the_consumption_its_next_run_would_commit() -> None:
    loop = settled_loop(consume_at_acceptance=True)
    offer = loop.offer()
    assert offer is not None
    assert (offer.record_count, offer.settings, offer.context_tokens) == (0, DEFAULTS, None)
    plan = offer.plan("send")
    assert (plan.queue, plan.mode, plan.defaults) == ("send", "one-at-a-time", DEFAULTS)
    assert offer.plan("steering").queue == "steering"
    # The run's ids are reserved once: asking again offers the same plan.
    assert plan.owed == OwedWork(
        stage="inference", loop_id="id3", turn_id="id4", inference_id="id6"
    )
    assert loop.offer() == offer


def test_no_offer_where_the_run_could_differ() -> None:
    assert settled_loop().offer() is None  # a feature observes the hooks before consumption
    counter = itertools.count()
    fresh = AgentLoop(
        "agent",
        new_id=lambda: f"id{next(counter)}",
        defaults=DEFAULTS,
        consume_at_acceptance=True,
    )
    assert fresh.offer() is None  # nothing loaded yet: its mirror vouches for nothing
    running = settled_loop(consume_at_acceptance=True)
    running.handle(Start())
    assert running.offer() is None  # a run is under way


def test_a_run_consumed_at_acceptance_goes_straight_to_the_inference() -> None:
    loop = settled_loop(consume_at_acceptance=True)
    offer = loop.offer()
    assert offer is not None

    effects = loop.handle(consumed(offer))

    # No reload, no before_turn (no feature overrides it), no consumption commit: the
    # hooks still observed in their order, then the inference.
    assert not [e for e in effects if isinstance(e, LoadState | RunHook | Commit)]
    observed = [e.hook for e in effects if isinstance(e, Observe)]
    assert observed == ["before_agent_loop", "message_accepted", "before_inference"]
    (start,) = [e for e in effects if isinstance(e, StartInference)]
    assert [type(m).__name__ for m in start.messages] == ["UserMessage"]
    assert loop.running
    assert loop.owed == offer.plan("send").owed
    assert loop.offer() is None


def test_an_unknown_outcome_distrusts_the_mirror_and_the_next_start_reloads_all() -> None:
    loop = settled_loop(consume_at_acceptance=True)
    assert loop.offer() is not None

    assert loop.handle(AcceptanceOutcomeUnknown()) == []
    assert loop.offer() is None
    effects = loop.handle(Start())
    assert [e for e in effects if isinstance(e, LoadState)] == [LoadState(records=True)]
