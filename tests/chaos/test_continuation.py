"""The continuation of a cut response (docs/lifecycle.md), checked by the crash_recovery suite.

Every response of the crash_recovery model starts with a reasoning block, so a crash often
cuts one after its first block. The runtime must continue it after "Continue from where you
left off." — never settle over it (C2) nor send a request that ends with the model's own
message (C1). Under :func:`~agentkeep.chaos._mutants.runtime.settles_over_a_truncated_answer` (no
continuation) the suite must catch the cut answer within a few seeds.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.chaos import Offer, frame
from agentkeep.chaos._mutants.runtime import settles_over_a_truncated_answer
from agentkeep.chaos.campaigns import crash_recovery, first_caught
from agentkeep.chaos.invariants import check_state
from agentkeep.chaos.process import DurableState, ProcessReport
from agentkeep.chaos.world import ChaosWorld
from agentkeep.persistence.postgres import PostgresReadOnlyStore
from agentkeep.persistence.store import Store
from agentkeep.providers.protocol import CancelToken
from agentkeep.providers.responding import RespondingModel
from agentkeep.types import (
    AssistantMessage,
    Context,
    ModelSessionOptions,
    ReasoningBlock,
    Selection,
    UserMessage,
)
from agentkeep.types.records import BlockRecord, ConversationRecord, SystemRecord, UserRecord

#: The mutant is caught where a crash cuts a response right after its reasoning and a later
#: process settles over it: seeds 17, 25, 27, 30, 34, 39 of 0–39 (2026-12-02, two runs agreed
#: but for 34) — only 17 below 20, so the search gets 40 seeds, the healthy scan 20.
MUTANT_SEEDS = range(40)
HEALTHY_SEEDS = range(20)
CONTINUE = "Continue from where you left off."


def test_crash_recovery_catches_a_runtime_that_settles_over_a_cut_answer() -> None:
    with settles_over_a_truncated_answer():
        caught = first_caught(crash_recovery, MUTANT_SEEDS, {"C1", "C2"})
    assert caught is not None, (
        f"crash_recovery never noticed an answer cut short and never continued in "
        f"{len(MUTANT_SEEDS)} seeds"
    )
    assert "response cut short" in caught.describe()


def test_the_seed_the_mutant_fails_passes_without_it() -> None:
    with settles_over_a_truncated_answer():
        caught = first_caught(crash_recovery, MUTANT_SEEDS, {"C1", "C2"})
    assert caught is not None
    healthy = crash_recovery(caught.seed)
    assert healthy.ok, healthy.describe()


def test_a_healthy_crash_recovery_run_continues_a_cut_response(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some seed of the healthy suite cuts a response after its reasoning and continues it:
    the notice is in the final history right after that block, and every run is clean."""
    final: list[list[Any]] = []  # each seed's final history, read where the seed ran
    real = frame.fresh_database

    @contextlib.contextmanager
    def read_before_dropping(database: str | None = None) -> Iterator[str | None]:
        with real(database) as url:
            yield url
            if url is not None:  # on a server the seed's schema is dropped when it ends
                reader = PostgresReadOnlyStore.open(url, tmp_path / "reader")
                try:
                    final.append(reader.read(lambda tx: tx.records.load("chaosagent")))
                finally:
                    reader.close()

    monkeypatch.setattr(frame, "fresh_database", read_before_dropping)
    for seed in HEALTHY_SEEDS:
        home = tmp_path / f"seed{seed}"
        result = crash_recovery(seed, home=home)
        assert result.ok, result.describe()
        if final:
            records = final.pop()
        else:
            with Store.open(home / "state") as store:
                records = store.read(lambda tx: tx.records.load("chaosagent"))
        for before, record in itertools.pairwise(records):
            continued = isinstance(record, SystemRecord) and CONTINUE in str(record.message)
            if not continued:
                continue
            # Any completed block whose response never ended is continued (the answer may
            # look whole: the transaction ending its response is what was lost).
            assert isinstance(before, BlockRecord)
            if isinstance(before.block, ReasoningBlock):
                return
    raise AssertionError(f"no seed in {list(HEALTHY_SEEDS)} cut a response after its reasoning")


def test_c2_names_a_send_consumed_right_after_a_cut_response(tmp_path: Path) -> None:
    world = ChaosWorld(tmp_path / "state", 0)
    world.offer(Offer(id="m0", text="m0"), Offer(id="m1", text="m1"))
    world.reports.append(ProcessReport(generation=1, faults=None))
    state = _state(
        UserRecord(message_id="m0", message=_user("m0")),
        BlockRecord(block=ReasoningBlock(text="thinking", reasoning="sig")),
        UserRecord(message_id="m1", message=_user("m1")),
    )
    found = [v for v in check_state(world, state, process=1) if v.invariant == "C2"]
    assert len(found) == 1
    assert "'m1'" in found[0].detail


def test_the_responding_model_counts_a_request_that_ends_with_its_own_message() -> None:
    model = RespondingModel()
    session = model.open_model_session("s", ModelSessionOptions(instructions=""))
    prefill = Context(instructions="", messages=(_user("q"), AssistantMessage(content=())))
    asked = Context(instructions="", messages=(_user("q"),))
    for context in (prefill, asked):
        list(session.stream(context, Selection(model="gym-1"), CancelToken()))
    assert model.prefills == (1,)


def _user(text: str) -> UserMessage:
    return ak.user(text)


def _state(*records: ConversationRecord) -> DurableState:
    return DurableState(
        records=records, queued=(), notices=(), pending=(), owed=None, settings=None
    )
