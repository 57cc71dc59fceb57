"""An embedder transaction under crashes: its sends and its KV write land all together or
not at all, wherever the store fails (each operation of the transaction, its COMMIT and the
point right after the COMMIT before anyone is told).

The store fails at operation N in ``crash`` mode (N and every later operation raise, as if
the process had died there); the system is then reopened without faults and its durable
state read.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.chaos import FaultInjection, FaultPlan
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.kv_keys import escape_segment, scope_prefix

pytestmark = pytest.mark.timeout(120)

AGENTS = ("alpha", "beta")
SHARED_KEY = scope_prefix("system", "feature", "embedder") + escape_segment("batch")


class Settled(ak.Feature):
    """Latches each agent's settlement."""

    name = "settled"

    def __init__(self) -> None:
        self.settled = {agent_id: threading.Event() for agent_id in AGENTS}

    def after_agent_settled(self, ctx: ak.HookContext, error: str | None) -> None:
        self.settled[ctx.agent_id].set()


def _open(home: Path, faults: FaultPlan | None, **options: Any) -> ak.AgentSystem:
    model = ak.ScriptedModel()
    model.add(ak.script.text("one"), ak.script.text("two"))
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(
        home,
        providers=providers,
        provider="local",
        model="gym-1",
        testing=FaultInjection(faults=faults),
        restart_intensity=ak.RestartIntensity(max_restarts=1, period_seconds=10.0),
        **options,
    )


def _scenario(system: ak.AgentSystem) -> tuple[int, int]:
    """Create the agents, then one transaction: a KV write, a send and a steer. Returns the
    operation count before the transaction and at the end of its work."""
    for agent_id in AGENTS:
        system.create(id=agent_id)
    store = system.internals.store
    before = store.statistics().operations
    inside: list[int] = []

    def work(t: ak.SystemTransaction) -> None:
        t.shared_kv("embedder").write("batch", "b1")
        t.send(AGENTS[0], ak.user("to alpha"), id="m-alpha")
        t.steer(AGENTS[1], ak.user("to beta"), id="m-beta")
        inside.append(store.statistics().operations)

    system.transaction(work)
    return before, inside[0]


def _landed(tx: Transaction) -> list[bool]:
    """Per part of the transaction, whether it is durable (a message by its claimed id)."""
    parts = []
    for agent_id, message_id in zip(AGENTS, ("m-alpha", "m-beta"), strict=True):
        rows = tx.sql.query(
            "SELECT count(*) FROM message_ids WHERE agent_id = ? AND message_id = ?",
            (agent_id, message_id),
        )
        parts.append(rows[0][0] == 1)
        # A message that landed is owed (queued or already taken up), never half-written.
        queued = [q.id for q in tx.queue.messages(agent_id)]
        if parts[-1] and message_id in queued:
            assert tx.facts.read_owed(agent_id) is not None, f"{message_id} queued, not owed"
    parts.append(tx.kv.read(SHARED_KEY) == "b1")
    return parts


def test_the_reference_run_lands_every_part(tmp_path: Path) -> None:
    with _open(tmp_path / "reference", None, resume=False) as system:
        _scenario(system)
        assert system.internals.store.read(_landed) == [True, True, True]


def test_a_crash_anywhere_in_the_transaction_lands_all_of_it_or_none(tmp_path: Path) -> None:
    with _open(tmp_path / "reference", None, resume=False) as system:
        before, inside = _scenario(system)
    # The work's own operations, then the end of the item, COMMIT and after_commit.
    outcomes: dict[int, list[bool]] = {}
    for at in range(before + 1, inside + 4):
        home = tmp_path / f"crash-{at}"
        crashing = _open(home, FaultPlan(at=at, mode="crash"), resume=False)
        try:
            _scenario(crashing)
        except Exception:  # the crash surfaces wherever it lands
            pass
        finally:
            crashing.close(timeout_seconds=5)
        with _open(home, None, resume=False) as reopened:
            landed = reopened.internals.store.read(_landed)
        assert landed in ([True, True, True], [False, False, False]), (at, landed)
        outcomes[at] = landed
    # Both were reached: a crash before the COMMIT rolled it all back, one after it kept all.
    assert [False, False, False] in outcomes.values(), outcomes
    assert [True, True, True] in outcomes.values(), outcomes


def test_a_commit_of_unknown_outcome_wakes_every_agent_it_sent_to(tmp_path: Path) -> None:
    """The COMMIT landed but the caller heard ``CommitOutcomeUnknownError`` (a fault right
    after it, once): no after-commit callback told the agents, so the system wakes them —
    both messages are answered in this process, not at the next open."""
    with _open(tmp_path / "reference", None, resume=False) as system:
        _, inside = _scenario(system)
    landed_unknown = 0
    for at in range(inside + 1, inside + 4):
        settled = Settled()
        with _open(
            tmp_path / f"flaky-{at}",
            FaultPlan(at=at, mode="flaky"),
            resume=False,
            features=[settled],
        ) as system:
            try:
                _scenario(system)
            except ak.CommitOutcomeUnknownError:
                landed = system.internals.store.read(_landed)
                if landed == [False, False, False]:
                    continue  # the COMMIT itself failed: nothing to answer
                assert landed == [True, True, True], landed
                landed_unknown += 1
                for agent_id in AGENTS:
                    assert settled.settled[agent_id].wait(20), agent_id
                    transcript = system.transcript(agent_id)
                    assert any(isinstance(m, ak.AssistantMessage) for m in transcript)
            except ak.StoreError:
                pass  # failed before the COMMIT: nothing landed, nobody to wake
    assert landed_unknown == 1
