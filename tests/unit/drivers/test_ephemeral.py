"""Ephemeral live deltas (``text.delta``, not stored, no sequence) beside
the exactly-once, in-order durable events of a subscription."""

from __future__ import annotations

import threading

from agentkeep.drivers import DriverContext, DriverResult, DriverRunRequest
from agentkeep.persistence.ledger import MAX_PENDING_EPHEMERALS
from agentkeep.providers import script
from agentkeep.sessions import SessionEvent, Subscription

from .conftest import DriverWorld, Scripted


def _chatty(count: int, gate: threading.Event | None = None) -> Scripted:
    def run(request: DriverRunRequest, context: DriverContext) -> DriverResult:
        if gate is not None:
            assert gate.wait(10)
        for index in range(count):
            context.delta(f"d{index}")
            context.emit("progress", {"index": index})
        return DriverResult()

    return Scripted("remote", run)


def _drain(subscription: Subscription, durable: int) -> list[SessionEvent]:
    """Read until ``durable`` durable events came (and whatever ephemerals came with them)."""
    seen: list[SessionEvent] = []
    while sum(1 for e in seen if not e.ephemeral) < durable:
        seen.append(subscription.next(timeout_seconds=10))
    return seen


def test_ephemerals_interleave_without_touching_the_durable_order(world: DriverWorld) -> None:
    count = 150
    system = world.open([_chatty(count)])
    session_id = world.session(system, "remote")
    live = system.subscribe(session_id, ephemeral=True)
    plain = system.subscribe(session_id)
    reader: list[SessionEvent] = []
    done = threading.Event()
    total = 3 + count + 1  # queued, accepted, running, progress…, completed

    def read() -> None:
        reader.extend(_drain(live, total))
        done.set()

    thread = threading.Thread(target=read)
    thread.start()
    assert system.sessions.send(session_id, "go").wait(timeout_seconds=20).status == "completed"
    assert done.wait(20)
    thread.join(5)

    durable = [e for e in reader if not e.ephemeral]
    assert [e.sequence for e in durable] == list(range(1, total + 1))  # exactly once, in order
    assert durable == system.events(session_id, limit=1000)
    deltas = [e for e in reader if e.ephemeral]
    assert [e.data["text"] for e in deltas] == [f"d{i}" for i in range(count)]
    assert all(e.sequence == 0 and e.type == "text.delta" for e in deltas)
    # Each delta was published before its progress event committed, and comes before it.
    position = {id(e): i for i, e in enumerate(reader)}
    progress = [e for e in durable if e.type == "progress"]
    for delta, event in zip(deltas, progress, strict=True):
        assert position[id(delta)] < position[id(event)]
    assert live.last_sequence == total  # ephemerals never move the cursor
    live.close()

    # A plain subscription never sees an ephemeral; a later one never gets them replayed.
    assert [e.sequence for e in _drain(plain, total)] == list(range(1, total + 1))
    later = system.subscribe(session_id, ephemeral=True)
    replay = _drain(later, total)
    assert not any(e.ephemeral for e in replay)
    assert len(replay) == total


def test_a_slow_subscriber_loses_old_ephemerals_never_a_durable_event(world: DriverWorld) -> None:
    count = MAX_PENDING_EPHEMERALS + 200
    gate = threading.Event()
    system = world.open([_chatty(count, gate)])
    session_id = world.session(system, "remote")
    slow = system.subscribe(session_id, ephemeral=True)
    sent = system.sessions.send(session_id, "go")
    gate.set()
    assert sent.wait(timeout_seconds=30).status == "completed"  # nobody read meanwhile

    seen = _drain(slow, 3 + count + 1)
    durable = [e for e in seen if not e.ephemeral]
    assert [e.sequence for e in durable] == list(range(1, 3 + count + 2))
    deltas = [e.data["text"] for e in seen if e.ephemeral]
    assert len(deltas) == MAX_PENDING_EPHEMERALS
    assert deltas == [f"d{i}" for i in range(count - MAX_PENDING_EPHEMERALS, count)]  # newest
    assert slow.dropped_ephemerals == 200
    slow.close()


def test_the_native_loop_streams_its_text_as_ephemeral_deltas(world: DriverWorld) -> None:
    world.model.add(script.text("hello there friend", chunks=3))
    system = world.open([])
    session = system.create()
    live = system.subscribe(session.id, ephemeral=True)
    done = system.sessions.send(session.id, "hi").wait(timeout_seconds=10)
    assert done.status == "completed"
    durable_count = len(system.events(session.id, limit=1000))
    seen = _drain(live, durable_count)
    live.close()
    deltas = [e for e in seen if e.ephemeral]
    assert "".join(e.data["text"] for e in deltas) == "hello there friend"
    assert len(deltas) == 3
    assert all(e.type == "text.delta" and e.session_id == session.id for e in deltas)
    assert not any(e.type == "text.delta" for e in system.events(session.id, limit=1000))
    # Every delta came before the finished block that holds the text.
    types = [e.type if not e.ephemeral else "delta" for e in seen]
    last_delta = max(i for i, t in enumerate(types) if t == "delta")
    assert last_delta < types.index("assistant.block")
