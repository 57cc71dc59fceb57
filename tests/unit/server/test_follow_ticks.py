"""``HttpBackend.follow`` with ``idle_seconds`` (what bounds ``talk``'s streamed wait through a
daemon): a tick comes after the idle bound even while heartbeats keep the connection busy,
and following on after a tick loses and repeats nothing (it resumes from the last event).

A live ``text.delta`` (ephemeral: sequence 0, no SSE id) may come through a follow or not,
depending on whether the stream was connected while the answer streamed; it never moves the
point a follow resumes from."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.unit.server.conftest import TOKEN

import agentkeep as ak
from agentkeep.client import HttpBackend
from agentkeep.persistence.ledger.hub import EphemeralQueue, LedgerHub
from agentkeep.providers.script import text
from agentkeep.types.ledger import TEXT_DELTA


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
        assert not any(e.ephemeral for e in seen)  # the first answer streamed before the follow
        started = time.monotonic()
        assert next(events) is None  # quiet again: another tick, despite the heartbeats
        assert time.monotonic() - started < 5
        second = served.system.sessions.send(session.id, ak.user("two"))
        while (event := next(events)) is None or event.type != "turn.completed":
            if event is not None and not event.ephemeral:  # live deltas: timing decides
                seen.append(event)
        seen.append(event)
        events.close()
        assert event.turn_id == second.turn.id
        sequences = [e.sequence for e in seen]
        assert sequences == list(range(1, len(seen) + 1))  # nothing lost, nothing repeated
    finally:
        backend.close()


def test_a_live_delta_before_a_tick_moves_no_resume_point(
    served: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delta, then a tick: the follow resumes from the last durable event, not from 0."""
    served.model.add(text("first answer"), text("second answer"))
    served.system.registry.create({"id": "helper", "name": "Helper"})
    session = served.system.sessions.start("helper", id="s1")
    first = served.system.sessions.send(session.id, ak.user("one"))
    served.system.sessions.wait(session.id, first.turn.id, timeout_seconds=30)
    armed: list[bool] = []
    listen = LedgerHub.listen

    def listen_then_delta(self: LedgerHub, agent_id: str) -> EphemeralQueue:
        """Once armed, the next stream to subscribe is handed a live delta at once."""
        queue = listen(self, agent_id)
        if armed and armed.pop():
            self.publish(agent_id, TEXT_DELTA, {"text": "live"}, first.turn.id)
        return queue

    monkeypatch.setattr(LedgerHub, "listen", listen_then_delta)
    backend = HttpBackend(served.url, TOKEN)
    try:
        events = backend.follow(session.id, after=0, idle_seconds=0.6)
        durable = []
        while (event := next(events)) is not None:
            durable.append(event)
        armed.append(True)
        delta = next(events)  # the reconnect after the tick subscribes and gets the delta
        assert delta is not None
        assert delta.ephemeral
        assert delta.type == TEXT_DELTA
        assert next(events) is None  # quiet: a tick after the delta
        second = served.system.sessions.send(session.id, ak.user("two"))
        while (event := next(events)) is None or event.type != "turn.completed":
            if event is not None and not event.ephemeral:
                durable.append(event)
        durable.append(event)
        events.close()
        assert event.turn_id == second.turn.id
        sequences = [e.sequence for e in durable]
        assert sequences == list(range(1, len(durable) + 1))  # nothing repeated from 0
    finally:
        backend.close()
