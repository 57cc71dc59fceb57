"""``HttpBackend.follow`` with ``idle_seconds`` (what bounds ``talk``'s streamed wait through a
daemon): a tick comes after the idle bound even while heartbeats keep the connection busy,
and following on after a tick loses and repeats nothing (it resumes from the last event).

A live ``text.delta`` (ephemeral: sequence 0, no SSE id) may come through a follow or not,
depending on whether the stream was connected while the answer streamed; it never moves the
point a follow resumes from."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from typing import Any

import pytest
from tests.unit.server.conftest import TOKEN

import agentkeep as ak
from agentkeep.cli import turn_waiting
from agentkeep.client import HttpBackend
from agentkeep.persistence.ledger.hub import EphemeralQueue, LedgerHub
from agentkeep.providers.script import ScriptedResponse, text
from agentkeep.types import Context, SessionEvent
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


def test_talk_s_streamed_wait_follows_on_from_the_last_durable_event_after_a_delta(
    served: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``talk``/``session send`` through a daemon: a live delta, then a tick (no answer yet);
    the wait follows on after the turn's last durable event, not from 0."""
    asked, go = threading.Event(), threading.Event()

    def respond(context: Context) -> ScriptedResponse:
        asked.set()  # the turn's events up to its request are committed
        assert go.wait(30), "never let go"  # the turn stays live until the follow resumed
        return text("the answer")

    served.model.add(respond)
    served.system.registry.create({"id": "helper", "name": "Helper"})
    session = served.system.sessions.start("helper", id="s1")
    sent = served.system.sessions.send(session.id, ak.user("one"))
    assert asked.wait(30)
    armed = [True]
    listen = LedgerHub.listen

    def listen_then_delta(self: LedgerHub, agent_id: str) -> EphemeralQueue:
        """The first stream to subscribe is handed a live delta of the turn at once."""
        queue = listen(self, agent_id)
        if armed and armed.pop():
            self.publish(agent_id, TEXT_DELTA, {"text": "live"}, sent.turn.id)
        return queue

    afters: list[int] = []
    follow = HttpBackend.follow

    def noting_after(
        self: HttpBackend,
        session_id: str,
        *,
        after: int,
        turn_id: str | None = None,
        idle_seconds: float | None = None,
    ) -> Generator[SessionEvent | None, None, None]:
        afters.append(after)
        if len(afters) == 2:
            go.set()  # the follow after the tick: now the answer may come
        return follow(self, session_id, after=after, turn_id=turn_id, idle_seconds=idle_seconds)

    monkeypatch.setattr(LedgerHub, "listen", listen_then_delta)
    monkeypatch.setattr(HttpBackend, "follow", noting_after)
    monkeypatch.setattr(turn_waiting, "PROGRESS_SECONDS", 0.5)
    backend = HttpBackend(served.url, TOKEN)
    try:
        assert turn_waiting._stream(backend, sent.turn, turn_waiting._Deadline(30))
        ledger = backend.events(session.id, after=0, limit=100)
    finally:
        go.set()
        backend.close()
    assert not armed  # the delta was published to the first follow
    durable = [e.sequence for e in ledger if e.turn_id == sent.turn.id]
    assert afters[0] == 0
    assert afters[1] in durable  # resumed after a durable event of the turn, not from 0
    assert capsys.readouterr().out == "the answer\n"  # printed once
