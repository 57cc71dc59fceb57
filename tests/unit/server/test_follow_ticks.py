"""``HttpBackend.follow`` with ``idle_seconds`` (what bounds ``talk``'s streamed wait through a
daemon): a tick comes after the idle bound even while heartbeats keep the connection busy,
and following on after a tick loses and repeats nothing (it resumes from the last event)."""

from __future__ import annotations

import time
from typing import Any

from tests.unit.server.conftest import TOKEN

import agentkeep as ak
from agentkeep.client import HttpBackend
from agentkeep.providers.script import text


def test_a_tick_comes_through_heartbeats_and_the_follow_resumes(served: Any) -> None:
    served.model.add(text("first answer"), text("second answer"))
    served.system.registry.create({"id": "helper", "name": "Helper"})
    session = served.system.sessions.start("helper", id="s1")
    first = served.system.sessions.send(session.id, ak.user("one"))
    served.system.sessions.wait(session.id, first.turn.id, timeout_seconds=30)
    backend = HttpBackend(served.url, TOKEN)
    try:
        events = backend.follow(session.id, after=0, idle_seconds=0.6)  # heartbeats: 0.2 s
        seen = []
        while (event := next(events)) is not None:
            seen.append(event)
        started = time.monotonic()
        assert next(events) is None  # quiet again: another tick, despite the heartbeats
        assert time.monotonic() - started < 5
        second = served.system.sessions.send(session.id, ak.user("two"))
        while (event := next(events)) is None or event.type != "turn.completed":
            if event is not None:
                seen.append(event)
        seen.append(event)
        events.close()
        assert event.turn_id == second.turn.id
        sequences = [e.sequence for e in seen]
        assert sequences == list(range(1, len(seen) + 1))  # nothing lost, nothing repeated
    finally:
        backend.close()
