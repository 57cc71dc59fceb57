"""A subscriber in another thread receives the committed backlog, then live
events, each exactly once and in order, from whatever ``after`` it (re)connects with."""

from __future__ import annotations

import random
import threading

import pytest

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.sessions import SessionEvent

from .conftest import LedgerWorld, all_events, types_of

TOTAL = 60


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_reconnecting_subscriber_receives_exactly_the_suffix(
    world: LedgerWorld, seed: int
) -> None:
    system = world.open()
    agent = system.create()
    for n in range(10):  # a committed backlog before anyone subscribes
        system.update_metadata(agent.id, {"n": n})
    rng = random.Random(seed)
    segments: list[tuple[int, list[int]]] = []
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            after = rng.randint(0, 10)
            while True:
                subscription = system.subscribe(agent.id, after=after)
                received: list[int] = []
                segments.append((after, received))
                stop_after = rng.randint(1, 15)
                for _ in range(stop_after):
                    event = subscription.next(timeout_seconds=30)
                    received.append(event.sequence)
                    if event.sequence == TOTAL:
                        subscription.close()
                        return
                subscription.close()
                # Reconnect from an arbitrary point of what was seen (a rewind, or a resume
                # from the last event), never behind this segment's start: it progresses.
                last = subscription.last_sequence
                after = rng.randint(max(0, last - len(received) + 1), last)
        except BaseException as error:  # surfaced below
            failure.append(error)

    follower = threading.Thread(target=follow)
    follower.start()
    for n in range(10, TOTAL):
        system.update_metadata(agent.id, {"n": n})
    follower.join(timeout=60)
    assert not follower.is_alive()
    assert failure == []
    for after, received in segments:
        assert received == list(range(after + 1, after + 1 + len(received)))
    assert segments[-1][1][-1] == TOTAL
    # What a subscriber hands out is what the store holds.
    every = all_events(system, agent.id)
    replay = system.subscribe(agent.id, after=0)
    assert [replay.next(timeout_seconds=5) for _ in range(TOTAL)] == every
    replay.close()


def test_a_subscriber_sees_a_whole_turn_as_it_commits(world: LedgerWorld) -> None:
    world.model.add(script.tool_call("echo", {"text": "hi"}), script.text("done"))
    system = world.open()
    agent = system.create()
    subscription = system.subscribe(agent.id)
    seen: list[SessionEvent] = []

    def follow() -> None:
        for event in subscription:
            seen.append(event)
            if event.type == "settled":
                return

    follower = threading.Thread(target=follow)
    follower.start()
    agent.send(ak.user("q"))
    follower.join(timeout=30)
    assert not follower.is_alive()
    assert seen == all_events(system, agent.id)
    assert types_of(seen)[-1] == "settled"
    subscription.close()


def test_next_times_out_and_close_ends_a_waiting_subscriber(world: LedgerWorld) -> None:
    system = world.open()
    agent = system.create()
    subscription = system.subscribe(agent.id)
    with pytest.raises(TimeoutError, match="after sequence 0"):
        subscription.next(timeout_seconds=0.05)

    ended = threading.Event()
    waiting = threading.Event()

    def follow() -> None:
        waiting.set()
        for _event in subscription:
            pass
        ended.set()

    follower = threading.Thread(target=follow)
    follower.start()
    waiting.wait(10)
    subscription.close()
    follower.join(timeout=10)
    assert ended.is_set()
    assert subscription.closed


def test_closing_the_system_ends_every_subscription(world: LedgerWorld) -> None:
    system = world.open()
    agent = system.create()
    system.update_metadata(agent.id, {"a": 1})
    subscription = system.subscribe(agent.id)
    assert subscription.next(timeout_seconds=5).sequence == 1
    ended = threading.Event()

    def follow() -> None:
        for _event in subscription:
            pass
        ended.set()

    follower = threading.Thread(target=follow)
    follower.start()
    system.close(timeout_seconds=10)
    follower.join(timeout=10)
    assert ended.is_set()
    with pytest.raises(StopIteration):
        subscription.next(timeout_seconds=1)
