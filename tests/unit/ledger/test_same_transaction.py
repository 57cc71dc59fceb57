"""Each event commits in the same transaction as the fact it reports.

A crash at every store operation a reference turn performs (each one in turn), then a reopen:
whatever committed, every fact has its event and every event its fact — never one without the
other — and the sequences are dense. (An acceptance whose event is written by a second
transaction fails here: a crash between the two leaves a claimed message id without its event.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.chaos import FaultInjection, FaultPlan
from agentkeep.persistence.transaction import SqliteTransaction
from agentkeep.providers import script
from agentkeep.types.records import BlockRecord, SystemRecord, ToolRecord, UserRecord

from .conftest import echo

AGENT = "ledger"
PARTS = 4
RECORD_EVENTS = {
    UserRecord: "message",
    BlockRecord: "assistant.block",
    ToolRecord: "tool.result",
    SystemRecord: "failure.note",
}


def _open(home: Path, faults: FaultPlan | None, **options: Any) -> ak.AgentSystem:
    model = ak.ScriptedModel()
    model.add(script.tool_call("echo", {"text": "hi"}, call_id="c1"), script.text("done"))
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(
        home,
        providers=providers,
        provider="local",
        model="gym-1",
        tools=[echo],
        testing=FaultInjection(faults=faults),
        restart_intensity=ak.RestartIntensity(max_restarts=1, period_seconds=10.0),
        **options,
    )


def _scenario(system: ak.AgentSystem) -> None:
    agent = system.create(id=AGENT)
    system.update_metadata(AGENT, {"topic": "ledger"})
    agent.send(ak.user("q1"), id="m1")
    agent.wait_for_idle(timeout_seconds=10)


def _check(tx: SqliteTransaction) -> None:
    if tx.agents.get(AGENT) is None:
        assert tx.ledger.events(AGENT, 0, 1000) == []
        return
    events = tx.ledger.events(AGENT, 0, 1000)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    kinds = [e.type for e in events]
    # Each conversation record has exactly its event, at its position.
    records = tx.records.load(AGENT)
    reported = [(e.data["position"], e.type) for e in events if "position" in e.data]
    assert reported == [(n, RECORD_EVENTS[type(r)]) for n, r in enumerate(records, start=1)]
    # An accepted message claimed its id: the claim and the event commit together.
    (claimed,) = tx.sql.query("SELECT count(*) FROM message_ids WHERE agent_id = ?", (AGENT,))[0]
    assert kinds.count("message.accepted") == claimed
    # The metadata change.
    assert kinds.count("metadata.changed") == (1 if tx.agents.get(AGENT).metadata else 0)  # type: ignore[union-attr]
    # The batch: durable pending calls or their results exist exactly when it was reported.
    dispatched = bool(tx.calls.pending(AGENT)) or any(isinstance(r, ToolRecord) for r in records)
    assert kinds.count("tool.batch") == (1 if dispatched else 0)
    # Settlement: the owed fact went exactly when it was reported.
    settled = claimed > 0 and tx.facts.read_owed(AGENT) is None
    assert kinds.count("settled") == (1 if settled else 0)


def test_the_reference_run_reports_every_fact(tmp_path: Path) -> None:
    with _open(tmp_path / "reference", None) as system:
        _scenario(system)
        system.internals.store.read(_check)  # type: ignore[arg-type]
        assert "settled" in [e.type for e in system.events(AGENT)]


@pytest.mark.parametrize("part", range(PARTS))
def test_a_crash_at_any_operation_leaves_facts_and_events_together(
    tmp_path: Path, part: int
) -> None:
    """Every operation of the reference run, in ``PARTS`` interleaved slices."""
    with _open(tmp_path / "reference", None) as system:
        _scenario(system)
        operations = system.internals.store.statistics().operations
    for at in range(1 + part, operations + 1, PARTS):
        home = tmp_path / f"crash-{at}"
        crashing = _open(home, FaultPlan(at=at, mode="crash"))
        try:
            _scenario(crashing)
        except Exception:  # the crash surfaces wherever it lands
            pass
        finally:
            crashing.close(timeout_seconds=5)
        with _open(home, None, resume=False) as reopened:
            try:
                reopened.internals.store.read(_check)  # type: ignore[arg-type]
            except AssertionError as error:
                raise AssertionError(f"after a crash at operation {at}: {error}") from error
