"""retry_forever: a flaky provider and a flaky or dying store under ``retry_forever=True``:
no failure note, no failed turn, no committed effect replayed, a surviving
process ends settled (``R1``–``R3``), and the permission-mode checks (``P1``–``P2``)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import msgspec

import agentkeep as ak
from agentkeep.chaos._mutants.retry_modes import (
    retry_gives_up_after_two_failures,
    retry_replays_the_last_batch,
)
from agentkeep.chaos.campaigns import DEFAULT_SEEDS, CampaignResult, first_caught
from agentkeep.chaos.process import DurableState, ProcessReport
from agentkeep.chaos.retry_modes import ModeChecks, ModeJournal, retry_forever
from agentkeep.loop.texts import ABORTED_CALL
from agentkeep.providers import script
from agentkeep.types import ToolResultMessage
from agentkeep.types.records import SystemRecord

TIMEOUT = 10.0


def test_retry_forever(seed: int, require_ok: Callable[[CampaignResult], None]) -> None:
    require_ok(retry_forever(seed))


def test_a_retry_that_gives_up_after_two_failures_is_caught() -> None:
    """Mutant: two failures in a row fall back to the give-up path (a failure note, a
    failed turn, work left owed). Two failures in a row are rare at the suite's failure
    rate, so the search runs past the default seeds: ``R1`` is first named at seed 13
    (docs/chaos.md); seed 8 sometimes shows the mutant earlier through ``R3`` alone."""
    with retry_gives_up_after_two_failures():
        caught = first_caught(retry_forever, range(4 * DEFAULT_SEEDS), {"R1"})
    assert caught is not None, "the retry checks never noticed a retry that gives up"
    named = {v.invariant for v in caught.violations}
    assert "R1" in named, caught.describe()


def test_a_retry_that_replays_the_committed_batch_is_caught() -> None:
    """Mutant: the load after a retry's backoff hands the loop the last answered batch again
    as pending, so its calls run again although their results are durable (``R2``). First
    caught at seed 1; the replayed batch keeps the run retrying, so that seed waits out its
    idle timeout (about 20 s)."""
    with retry_replays_the_last_batch():
        caught = first_caught(retry_forever, range(DEFAULT_SEEDS), {"R2"})
    assert caught is not None, "the replay check never noticed a committed effect run again"


def _r1_after(processes: list[tuple[bool, int]]) -> list[list[str]]:
    """``R1`` details named after each process of ``(aborted, failure notes it wrote)``."""
    checks = ModeChecks(cast(Any, SimpleNamespace(offers=[])), ModeJournal(retrying=True))
    notes: list[SystemRecord] = []
    named = []
    for generation, (aborted, written) in enumerate(processes, start=1):
        notes += [SystemRecord(message=ak.system("failed"), reason="failure")] * written
        state = DurableState(
            records=tuple(notes), queued=(), notices=(), pending=(), owed=None, settings=None
        )
        report = ProcessReport(generation=generation, faults=None, aborted=aborted)
        found = checks.after_process(state, report)
        named.append([v.detail for v in found if v.invariant == "R1"])
    return named


def test_r1_excuses_one_note_written_by_the_aborting_process_itself() -> None:
    assert _r1_after([(True, 1), (False, 0)]) == [[], []]
    assert _r1_after([(True, 2)]) == [["2 failure note(s) written while retrying forever"]]


def test_r1_judges_each_process_by_what_it_wrote_so_an_earlier_abort_excuses_nothing() -> None:
    """Two aborting processes that wrote nothing, then a healthy one that gave up: before,
    R1 compared the campaign's notes with its aborts (1 <= 2) and stayed silent (the CI run
    of stop 25, seed 8, named the mutant only through R3)."""
    named = _r1_after([(True, 0), (True, 0), (False, 1)])
    assert named == [[], [], ["1 failure note(s) written while retrying forever"]]


class _Args(msgspec.Struct):
    text: str = ""


def _open_with_gated_tool(
    home: Path, journal: ModeJournal, gates: dict[str, threading.Event]
) -> ak.AgentSystem:
    """A system whose one tool ``effect`` is journaled, and gated past the runner's last
    cancellation check: it sets ``entered`` and waits for ``release`` before the journal's
    check and the tool's body run, then sets ``finished``."""

    @ak.tool
    def effect(ctx: ak.ToolContext, args: _Args) -> str:
        """Have an effect."""
        return "done"

    journaled = journal.wrap(effect)
    run = journaled.execute

    def late(ctx: ak.ToolContext, args: Any) -> Any:
        gates["entered"].set()
        assert gates["release"].wait(TIMEOUT)
        try:
            return run(ctx, args)
        finally:
            gates["finished"].set()

    model = ak.ScriptedModel()
    model.add(script.tool_call("effect", {"text": "x"}), script.text("answered"))
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(
        home,
        providers=providers,
        provider="local",
        model="gym-1",
        tools=[dataclasses.replace(journaled, execute=late)],
        features=[journal],
    )


def test_a_tool_that_starts_after_its_own_abort_answer_committed_is_no_replay(
    tmp_path: Path,
) -> None:
    """retry_forever seed 58 on PostgreSQL under load: an abort answers a running call at
    once (``I24``), so a tool thread that passed the runner's last cancellation check just
    before it starts its body after the abort's answer committed. The journal read that
    answer and named ``R2``, but no execution's result was durable: this is the call's
    first and only run. The gate holds the thread in that window, deterministically."""
    journal = ModeJournal(retrying=True)
    gates = {name: threading.Event() for name in ("entered", "release", "finished")}
    system = _open_with_gated_tool(tmp_path / "state", journal, gates)
    try:
        live = SimpleNamespace(system=system, crashed=lambda: False)
        journal.attach(cast(Any, SimpleNamespace(generation=3, _live=live)))
        agent = system.create(id="raced")
        agent.send(ak.user("go"))
        assert gates["entered"].wait(TIMEOUT)
        agent.abort(wait=True, timeout_seconds=TIMEOUT)
        # The abort's answer is durable before the tool's body starts.
        aborted = [m for m in agent.transcript() if isinstance(m, ToolResultMessage)]
        assert [(m.is_error, [b.text for b in m.content]) for m in aborted] == [
            (True, [ABORTED_CALL])
        ]
        gates["release"].set()
        # The journal's check ran, through the live store, with the answer durable.
        assert gates["finished"].wait(TIMEOUT)
        assert agent.wait_for_idle(timeout_seconds=TIMEOUT)
    finally:
        gates["release"].set()
        system.close(timeout_seconds=TIMEOUT)
    (call_id,) = [m.call_id for m in aborted]
    assert [(g, call) for g, call, _mode in journal.tool_modes] == [(3, call_id)]
    assert journal.replays == []
