"""What one ``Sessions.send`` costs the store (issue 29 item 3: the daemon's ``wait: false``
acceptance): one small read that the session exists, and the acceptance transaction — no
read of the session's turns before it (its cost grew with every queued turn), no read of
the turn after it (the transaction has it), and the idempotency key asked once.

The model hangs the session's first turn, so every later send only queues behind it: the
backlog a loaded daemon has."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.persistence import codec
from agentkeep.persistence.handle import in_store_transaction
from agentkeep.providers import script
from agentkeep.sessions import UnknownSessionError

TIMEOUT = 30.0
_KEY_QUERY = "SELECT turn_id, input_hash FROM turn_inputs WHERE agent_id = ? AND idempotency_key"


class Traced:
    """Every statement the store runs while :attr:`on`, with the thread that ran it and
    whether that thread is the store's writer (whichever the backend's writer is)."""

    def __init__(self) -> None:
        self.on = False
        self.statements: list[tuple[str, bool, str]] = []

    def of(self, thread: str) -> list[str]:
        return [sql for name, _writer, sql in self.statements if name == thread]

    def writer(self) -> list[str]:
        return [sql for _name, writer, sql in self.statements if writer]


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Traced:
    trace = Traced()
    execute = codec.Statements.execute

    def tracing(self: codec.Statements, sql: str, params: tuple[Any, ...] = ()) -> Any:
        if trace.on:
            thread = threading.current_thread().name
            trace.statements.append((thread, in_store_transaction(), sql))
        return execute(self, sql, params)

    monkeypatch.setattr(codec.Statements, "execute", tracing)
    return trace


@pytest.fixture
def system(tmp_path: Path) -> Iterator[ak.AgentSystem]:
    providers = ak.Providers()
    providers.add("held", ak.ScriptedModel([script.hang()], record=False), kind="gym")
    opened = ak.AgentSystem.open(
        tmp_path / "state", providers=providers, provider="held", model="gym-1"
    )
    try:
        yield opened
    finally:
        with contextlib.suppress(ak.UnknownAgentError):  # the hung turn ends
            opened.abort("s")
        opened.close(timeout_seconds=TIMEOUT)


def _backlog(system: ak.AgentSystem, queued: int) -> None:
    """The session ``s`` with its first turn (which the model never answers) and ``queued``
    turns behind it: however far the loop got with the first, the others stay queued."""
    system.create(id="s")
    system.sessions.send("s", "Go.")
    for index in range(queued):
        system.sessions.send("s", f"Queued {index}.", idempotency_key=f"k{index}")


def test_a_send_reads_the_session_once_and_never_its_turns(
    system: ak.AgentSystem, traced: Traced
) -> None:
    _backlog(system, 20)
    traced.on = True
    sent = system.sessions.send("s", "One more.", idempotency_key="last")
    traced.on = False
    outside = traced.of(threading.current_thread().name)
    # One read, of the session's existence, answered without its turns or owed work.
    assert [sql for sql in outside if sql.startswith("SELECT")] == [
        "SELECT 1 FROM agents WHERE id = ? AND deleted_at_ms IS NULL"
    ]
    assert not [sql for sql in outside if "turns" in sql]
    assert sent.turn.status == "queued"
    assert sent.turn.number == 22
    assert not sent.duplicate
    assert sent.turn == system.sessions.turn("s", sent.turn.id)  # as the store holds it


def test_the_acceptance_asks_the_idempotency_key_once(
    system: ak.AgentSystem, traced: Traced
) -> None:
    _backlog(system, 2)
    traced.on = True
    sent = system.sessions.send("s", "Keyed.", idempotency_key="once")
    traced.on = False
    assert len([sql for sql in traced.writer() if sql.startswith(_KEY_QUERY)]) == 1
    again = system.sessions.send("s", "Keyed.", idempotency_key="once")
    assert again.duplicate
    assert again.turn.id == sent.turn.id
    with pytest.raises(ak.IdempotencyConflictError):
        system.sessions.send("s", "Something else.", idempotency_key="once")


def test_a_send_to_no_session_is_refused_before_anything_is_written(
    system: ak.AgentSystem, traced: Traced
) -> None:
    traced.on = True
    with pytest.raises(UnknownSessionError):
        system.sessions.send("nobody", "Hello?", idempotency_key="\x00 not checked first")
    traced.on = False
    assert traced.writer() == []


@pytest.mark.parametrize("key", ["tab\there", "nul\x00", "unit\x1f", "del\x7f"])
def test_a_key_with_a_control_character_is_refused(system: ak.AgentSystem, key: str) -> None:
    system.create(id="s")
    with pytest.raises(ak.InvalidMessageError, match="control characters"):
        system.sessions.send("s", "Hello.", idempotency_key=key)


def test_a_key_of_any_other_text_is_taken(system: ak.AgentSystem) -> None:
    system.create(id="s")
    for key in ("\x80 latin-1 control", "ключ", " spaces ~ ", "\u2028"):
        assert not system.sessions.send("s", "Hello.", idempotency_key=key).duplicate
