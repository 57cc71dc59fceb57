"""Focused regressions for bugs the chaos seeds found (each names the seed that found it)."""

from __future__ import annotations

from pathlib import Path

import agentkeep as ak
from agentkeep.chaos import ChaosWorld, Offer, default_providers, ledger_tools
from agentkeep.chaos.faultpoints import expect_label, find_label, recording_labels
from agentkeep.chaos.invariants import check_final, check_state
from agentkeep.persistence.faults import FaultPlan
from agentkeep.providers.responding import count_conversation
from agentkeep.types.records import SystemRecord, ToolRecord, rebuild_messages


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
    labels = _dry_run_labels(tmp_path, 18)
    user = find_label(labels, "INSERT INTO records")  # the user's record, at consumption
    at = expect_label(labels, find_label(labels, "INSERT INTO records", after=user), "INSERT")
    world = _one_flaky_turn(tmp_path, at, seed=18, expect=labels)  # one-call batches
    failed = world.durable()
    assert isinstance(failed.records[-1], SystemRecord), failed.records
    assert failed.records[-1].reason == "failure"
    assert failed.owed is not None, "a failed turn settled: nothing will ever answer it"
    world.run_process(start=True)
    state = world.durable()
    messages = rebuild_messages(list(state.records))
    assert _final_text(messages) == "answer-1", messages
    assert state.owed is None


def _dry_run_labels(tmp_path: Path, seed: int) -> list[str]:
    """The store operations of one fault-free run of the one-message turn, in order."""
    world = ChaosWorld(tmp_path / "dry", seed, providers=default_providers)
    world.create_agent()
    with recording_labels() as recording:
        world.run_process(messages=[Offer(id="f0", text="f message 0")])
    return recording.labels


def _after_commit_of(labels: list[str], statement: str) -> int:
    """The ``after_commit`` of the transaction that runs the first ``statement``."""
    return expect_label(
        labels,
        find_label(labels, "after_commit", after=find_label(labels, statement)),
        "after_commit",
    )


def _one_flaky_turn(
    tmp_path: Path, at: int, *, seed: int = 0, expect: list[str] | None = None
) -> ChaosWorld:
    """One message, with store operation ``at`` flaky; with ``expect`` (a dry run's labels),
    asserts the fault run performed the same operations up to ``at``, so the fault hit the
    operation the caller picked from them."""
    world = ChaosWorld(tmp_path / "state", seed, providers=default_providers)
    world.create_agent()
    flaky = FaultPlan(at=at, mode="flaky")
    with recording_labels() as recording:
        world.run_process(messages=[Offer(id="f0", text="f message 0")], faults=flaky)
    if expect is not None:
        assert recording.labels[:at] == expect[:at], "the fault run diverged before the fault"
    return world


def test_batch_commit_with_unknown_outcome_is_not_answered_as_undispatched(
    tmp_path: Path,
) -> None:
    """flaky_store seed 114 (58 sweep seeds): the fault hits ``after_commit`` of the batch
    dispatch, so the batch *is* durable but the commit reports an unknown outcome. The turn
    fails and settles the call as if it had never been dispatched ("The turn failed before
    this tool call finished.") while its pending entry stays; the next process resumes the
    batch and answers the call a second time (invariant I15)."""
    labels = _dry_run_labels(tmp_path, 0)
    world = _one_flaky_turn(
        tmp_path, _after_commit_of(labels, "INSERT INTO pending_calls"), expect=labels
    )
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
    "The last turn failed: …" behind a call it never settled (invariant I16). (With the settle-on-
    failure bug above, the call then stays unanswered for good: seeds 596, 1003.)"""
    labels = _dry_run_labels(tmp_path, 0)
    user = find_label(labels, "INSERT INTO records")  # the user's record, at consumption
    block = find_label(labels, "INSERT INTO records", after=user)  # the tool-call block
    at = expect_label(labels, find_label(labels, "after_commit", after=block), "after_commit")
    world = _one_flaky_turn(tmp_path, at, expect=labels)
    found = check_state(world, world.durable(), process=1)
    assert not [v for v in found if v.invariant == 11], found


def test_settlement_with_unknown_outcome_leaves_no_orphan_failure_note(tmp_path: Path) -> None:
    """flaky_store seed 10: the fault hits ``after_commit`` of the settlement, so the agent
    *is* settled (owed erased) but the loop reads an unknown outcome as a failed turn and
    appends "The last turn failed: COMMIT reported …" after the durable ``answer-1``, with no
    owed fact: a note nobody will answer, for a turn that had succeeded (invariant I11)."""
    labels = _dry_run_labels(tmp_path, 0)
    world = _one_flaky_turn(
        tmp_path, _after_commit_of(labels, "DELETE FROM owed_work"), expect=labels
    )
    found = check_state(world, world.durable(), process=1)
    assert not [v for v in found if v.invariant == 6], found


def test_any_single_flaky_operation_of_one_turn_keeps_the_history_whole(tmp_path: Path) -> None:
    """The three tests above pin one operation each (found by what it is in a dry run's
    labels); this one sweeps every operation of a one-message turn (as many as a dry run
    performs), so it also guards operations nobody named: a single flaky operation, then a
    healthy restart, must leave invariants I7, I14, I15 and I16 intact and the message answered."""
    broken: list[str] = []
    for at in range(1, len(_dry_run_labels(tmp_path, 0)) + 1):
        world = _one_flaky_turn(tmp_path / str(at), at)
        found = check_state(world, world.durable(), process=1)
        report = world.run_process(start=True)
        state = world.durable()
        found += check_state(world, state, process=2)
        found += check_final(world, state, report)
        broken += [f"flaky@{at}: {v.describe()}" for v in found]
    assert not broken, "\n".join(broken)
