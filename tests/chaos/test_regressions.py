"""Focused regressions for bugs the chaos seeds found (each names the seed that found it)."""

from __future__ import annotations

from pathlib import Path

import agentkeep as ak
from agentkeep.chaos import ChaosWorld, Offer, default_providers, ledger_tools
from agentkeep.chaos.invariants import check_final, check_state
from agentkeep.model import SystemRecord, ToolRecord, rebuild_messages
from agentkeep.persistence.faults import FaultPlan
from agentkeep.providers.responding import count_conversation


def _final_text(messages: list[ak.Message]) -> str | None:
    last = messages[-1] if messages else None
    if isinstance(last, ak.AssistantMessage) and isinstance(last.content[-1], ak.TextBlock):
        return last.content[-1].text
    return None


def test_second_compaction_replaces_exactly_what_it_summarised(tmp_path: Path) -> None:
    """compaction_under_load seed 0: ``ReplaceWithCompaction.through_position`` is a record
    *count* (the machine's ``len(self.records)``) but ``replace_records`` deletes by stored
    *position*; after a first compaction the positions no longer start at 1, so the next
    compaction erases too little: the summary and the kept suffix both hold the same
    messages (or a result loses its call)."""
    with ak.AgentSystem.open(
        tmp_path,
        providers=default_providers(0),
        provider="local",
        model="gym-1",
        tools=ledger_tools(),
    ) as system:
        agent = system.create(id="agent1")
        for i in range(3):
            agent.send(ak.user(f"m{i}"), id=f"m{i}")
            assert agent.wait_for_idle(timeout_seconds=10)
            agent.compact(wait=True, timeout_seconds=10)
        agent.send(ak.user("m3"), id="m3")
        assert agent.wait_for_idle(timeout_seconds=10)
        transcript = agent.transcript()
    users, _ = count_conversation(tuple(transcript))
    assert users == 4, transcript
    assert _final_text(transcript) == "answer-4", transcript


def test_failed_turn_is_answered_after_a_restart(tmp_path: Path) -> None:
    """flaky_store seed 18 (and most flaky seeds): a turn that failed (a block commit hit a
    flaky store operation) appends "The last turn failed: …" and then *settles*, erasing the
    owed fact; a restarted system therefore never resumes the agent and the failed question is
    never answered (seed README: "a restarted agent now owes a response")."""
    world = ChaosWorld(tmp_path / "state", 18, providers=default_providers)  # one-call batches
    world.create_agent()
    flaky = FaultPlan(at=33, mode="flaky")  # the first block's INSERT (29 before the ledger)
    world.run_process(messages=[Offer(id="f0", text="f message 0")], faults=flaky)
    failed = world.durable()
    assert isinstance(failed.records[-1], SystemRecord), failed.records
    assert failed.records[-1].reason == "failure"
    assert failed.owed is not None, "a failed turn settled: nothing will ever answer it"
    world.run_process(start=True)
    state = world.durable()
    messages = rebuild_messages(list(state.records))
    assert _final_text(messages) == "answer-1", messages
    assert state.owed is None


def _one_flaky_turn(tmp_path: Path, at: int) -> ChaosWorld:
    # One-call batches, as when the operation numbers below were found.
    world = ChaosWorld(tmp_path / "state", 0, providers=default_providers)
    world.create_agent()
    flaky = FaultPlan(at=at, mode="flaky")
    world.run_process(messages=[Offer(id="f0", text="f message 0")], faults=flaky)
    return world


def test_batch_commit_with_unknown_outcome_is_not_answered_as_undispatched(
    tmp_path: Path,
) -> None:
    """flaky_store seed 114 (58 sweep seeds): the fault hits ``after_commit`` of the batch
    dispatch, so the batch *is* durable but the commit reports an unknown outcome. The turn
    fails and settles the call as if it had never been dispatched ("The turn failed before
    this tool call finished.") while its pending entry stays; the next process resumes the
    batch and answers the call a second time (§7.9, §7.10)."""
    world = _one_flaky_turn(tmp_path, 54)
    state = world.durable()
    answered = {r.message.call_id for r in state.records if isinstance(r, ToolRecord)}
    still_pending = {p.call.call_id for p in state.pending}
    assert not answered & still_pending, state
    world.run_process(start=True)
    state = world.durable()
    results = [r.message.call_id for r in state.records if isinstance(r, ToolRecord)]
    assert len(results) == len(set(results)), results


def test_block_commit_with_unknown_outcome_leaves_no_call_behind_the_note(
    tmp_path: Path,
) -> None:
    """flaky_store seed 77 (40 sweep seeds): the fault hits ``after_commit`` of the tool-call
    block, so the call is durable but the loop believes it is not; the failing turn appends
    "The last turn failed: …" behind a call it never settled (§7.11). (With the settle-on-
    failure bug above, the call then stays unanswered for good: seeds 596, 1003.)"""
    world = _one_flaky_turn(tmp_path, 37)
    found = check_state(world, world.durable(), process=1)
    assert not [v for v in found if v.invariant == 11], found


def test_settlement_with_unknown_outcome_leaves_no_orphan_failure_note(tmp_path: Path) -> None:
    """flaky_store seed 10: the fault hits ``after_commit`` of the settlement, so the agent
    *is* settled (owed erased) but the loop reads an unknown outcome as a failed turn and
    appends "The last turn failed: COMMIT reported …" after the durable ``answer-1``, with no
    owed fact: a note nobody will answer, for a turn that had succeeded (§7.6, §7.22)."""
    world = _one_flaky_turn(tmp_path, 92)
    found = check_state(world, world.durable(), process=1)
    assert not [v for v in found if v.invariant == 6], found


def test_any_single_flaky_operation_of_one_turn_keeps_the_history_whole(tmp_path: Path) -> None:
    """The three tests above pin one operation each (the same statements as on the runtime
    they were found on, renumbered when the ledger added its statements: 31→37, 44→54,
    74→92); this one sweeps every operation of a one-message turn, so it keeps guarding
    the same bugs when the operation count moves: a single flaky operation, then a healthy
    restart, must leave §7.6/§7.9/§7.10/§7.11 intact and the message answered."""
    broken: list[str] = []
    for at in range(1, 100):
        world = _one_flaky_turn(tmp_path / str(at), at)
        found = check_state(world, world.durable(), process=1)
        report = world.run_process(start=True)
        state = world.durable()
        found += check_state(world, state, process=2)
        found += check_final(world, state, report)
        broken += [f"flaky@{at}: {v.describe()}" for v in found]
    assert not broken, "\n".join(broken)
