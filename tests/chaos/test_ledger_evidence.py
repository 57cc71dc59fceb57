"""The ledger's evidence beyond the in-process suites: the ledger checks of the
real-process (``process_kills``), ``lifecycle_races`` and ``power_loss`` campaigns, the
SIGKILL-surviving subscriber, and the mutants each campaign must catch, naming the check.

``python -m agentkeep.chaos.ledger_sweep --mutants`` prints the first catching seed of every
mutant (docs/chaos.md); these tests replay catches within each campaign's CI seeds.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from tests.postgres_server import on_sqlite

from agentkeep.chaos._mutants.runtime import LEDGER_MUTANTS
from agentkeep.chaos.campaigns import DEFAULT_SEEDS, SUITES, first_caught
from agentkeep.chaos.ledger_subscriber import judge_subscriber_log
from agentkeep.chaos.ledger_sweep import CI_SEEDS, EXPECTED, first_catch, main, run_seed
from agentkeep.chaos.process_kills import Kill, plan, run_campaign
from agentkeep.chaos.process_worker import SUBSCRIBER_LOG
from agentkeep.chaos.turn_checks import judge_keyed_sends
from agentkeep.types import SessionEvent

# process_kills seeds cost 1.5-5 s each (one Python process per kill), so each mutant is
# replayed once: at seed 2 (a CI seed: one store kill at operation 22, then a process left
# alone), which catches most; `ledger_sweep --mutants` gives the first catching seed of each.
KILLS_SEED = 2
# L3 and T2 need an event or a terminal turn durable in one process and changed in a later
# one; seed 2's first process dies before its first acceptance commits, and whether a
# timer- or tool-killed process completed a turn first depends on timing. A first process
# that finishes (its store kill is out of reach), then the one left alone, is deterministic.
TWO_PROCESSES = [Kill("store", at=100_000), Kill(None)]
NEEDS_TWO = {"first_event_retimed_on_acceptance", "completion_overwrites_earlier_results"}
# accepted_event_in_second_transaction needs a kill between the acceptance's COMMIT and the
# event's own transaction; the CI seeds' store kills land elsewhere since turns added
# statements to every acceptance. Operation 26 is in that window after the first acceptance
# (found by killing at each of 14-29 on 2026-12-01, after the writer memo and lone items
# without savepoints: 24-28 catch it; renumber when the acceptance's statements change —
# the test fails when the window moves, it cannot pass vacuously).
SECOND_TRANSACTION_WINDOW = 26
# answer_is_the_continuation_alone needs a kill after the first answer's text block committed
# and before its response's end: store operations 94-102 of seed 2's first process (found by
# killing at each of 15-229 on 2026-12-04; 153-163 cut the second answer). Renumber when the
# statements before the first answer change: the test fails when the window moves.
ANSWER_CUT_WINDOW = 98
# The mutants a targeted kill replays instead of the CI seed.
TARGETED = {"accepted_event_in_second_transaction", "answer_is_the_continuation_alone"}


def _cases(campaign: str) -> list[tuple[str, str]]:
    return [(m, check) for m, (check, where) in EXPECTED.items() if campaign in where]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mutant", "check"),
    [c for c in _cases("process_kills") if c[0] not in TARGETED],
)
def test_each_process_kills_mutant_is_caught_with_its_check_named(mutant: str, check: str) -> None:
    assert KILLS_SEED in range(CI_SEEDS["process_kills"])
    kills = TWO_PROCESSES if mutant in NEEDS_TWO else None
    result = run_campaign(KILLS_SEED, kills=kills, mutant=mutant)
    named = [p for p in result.problems if p.startswith(f"{check} ")]
    assert named, f"{mutant} escaped: {result.describe()}"


@pytest.mark.slow
def test_a_kill_between_an_acceptance_and_its_late_event_is_caught() -> None:
    kills = [Kill("store", at=SECOND_TRANSACTION_WINDOW), Kill(None)]
    result = run_campaign(KILLS_SEED, kills=kills, mutant="accepted_event_in_second_transaction")
    assert any("'k0' has 1 durable fact(s) but 0 message.accepted" in p for p in result.problems), (
        result.describe()
    )


@pytest.mark.slow
def test_a_kill_after_the_answer_block_leaves_the_whole_answer_in_the_result() -> None:
    """Killed after the answer's block committed, before the response's
    end, the turn's result and message hold the cut block and the continuation (``T5``);
    the runtime before the fix (the mutant) completes it with the continuation alone."""
    kills = [Kill("store", at=ANSWER_CUT_WINDOW), Kill(None)]
    result = run_campaign(KILLS_SEED, kills=kills)
    assert result.ok, result.describe()
    assert result.answers_continued >= 1, result.describe()
    assert result.answers_judged >= result.answers_continued
    broken = run_campaign(KILLS_SEED, kills=kills, mutant="answer_is_the_continuation_alone")
    named = [p for p in broken.problems if p.startswith("T5 ")]
    assert named, f"the continuation alone escaped: {broken.describe()}"


@pytest.mark.sqlite_only(
    "power_loss cuts the database file's unsynced writes through a VFS; a server has no file"
)
@pytest.mark.parametrize(("mutant", "check"), _cases("power_loss"))
def test_each_power_loss_mutant_is_caught_within_the_ci_seeds(mutant: str, check: str) -> None:
    caught = first_catch("power_loss", mutant, check, range(CI_SEEDS["power_loss"]))
    assert caught is not None, f"{mutant} escaped {CI_SEEDS['power_loss']} power-loss seeds"


@pytest.mark.parametrize(("mutant", "check"), _cases("lifecycle_races"))
def test_each_lifecycle_mutant_is_caught_within_the_ci_seeds(mutant: str, check: str) -> None:
    caught = first_catch("lifecycle_races", mutant, check, range(CI_SEEDS["lifecycle_races"]))
    assert caught is not None, f"{mutant} escaped {CI_SEEDS['lifecycle_races']} lifecycle seeds"


@pytest.mark.parametrize(
    ("mutant", "check"),
    [
        ("terminal_turn_event_appended_twice", "T1"),
        ("completion_overwrites_earlier_results", "T2"),
        ("input_event_without_turn_id", "T3"),
    ],
)
def test_the_in_process_suites_judge_turns_too(mutant: str, check: str) -> None:
    with LEDGER_MUTANTS[mutant]():
        caught = first_caught(SUITES["crash_recovery"], range(DEFAULT_SEEDS), {check})
    assert caught is not None, f"crash_recovery never caught {mutant} in {DEFAULT_SEEDS} seeds"


def test_keyed_sends_that_got_two_turns_or_two_new_ones_are_named() -> None:
    sends = [
        {"key": "a", "turn_id": "t1", "created": True},
        {"key": "a", "turn_id": "t1", "created": False},
        {"key": "b", "turn_id": "t2", "created": True},
    ]
    assert judge_keyed_sends(sends, process=1) == []
    sends.append({"key": "a", "turn_id": "t3", "created": True})
    found = [v.detail for v in judge_keyed_sends(sends, process=1)]
    assert found == [
        "sends with idempotency key 'a' got turns ['t1', 't3']",
        "2 sends with idempotency key 'a' were accepted as new",
    ]


def test_a_retimed_first_event_is_seen_only_by_comparing_reads() -> None:
    """The facts all keep their events (L2 holds); the reread ledger differs (L3)."""
    run = run_seed("lifecycle_races", 0, "first_event_retimed_on_acceptance")
    assert run.checks["L3"], run.problems
    assert not run.checks["L2"], run.problems


@pytest.mark.slow
def test_the_subscriber_survives_every_kill_and_ends_with_the_whole_ledger(
    tmp_path: Path,
) -> None:
    """Seed 2's worker dies at store operation 22; the subscriber of the next one resumes
    from its log and drains: the log holds every durable event exactly once."""
    assert plan(KILLS_SEED)[0].kind == "store"
    result = run_campaign(KILLS_SEED, home=tmp_path)
    assert result.ok, result.describe()
    lines = [json.loads(line) for line in (tmp_path / SUBSCRIBER_LOG).read_text().splitlines()]
    connects = [line for line in lines if line["kind"] == "connect"]
    events = [line["sequence"] for line in lines if line["kind"] == "event"]
    assert {line["generation"] for line in connects} == {1, 2}, "it ran in both processes"
    assert any(line["after"] > 0 for line in connects), "it reconnected mid-ledger"
    assert events == list(range(1, len(events) + 1))
    drained = [line for line in lines if line["kind"] == "drained"]
    assert drained[-1]["tail"] == events[-1]
    assert drained[-1]["extra"] is None


@pytest.mark.slow
def test_a_subscriber_killed_between_receiving_and_recording_gets_the_event_again(
    tmp_path: Path,
) -> None:
    """The subscriber SIGKILLs its worker on receiving its 3rd event (the store kill is out
    of reach): the next worker's subscriber resumes from the 2nd and hands out the 3rd."""
    kills = [Kill("store", at=100_000, subscriber_at=3), Kill(None)]
    result = run_campaign(KILLS_SEED, home=tmp_path, kills=kills)
    assert result.runs[0].subscriber_killed, result.describe()
    assert result.ok, result.describe()
    lines = [json.loads(line) for line in (tmp_path / SUBSCRIBER_LOG).read_text().splitlines()]
    died = next(i for i, line in enumerate(lines) if line["kind"] == "kill")
    lost = lines[died]["sequence"]
    resumed = lines[died + 1 :]
    assert resumed[0] == {"kind": "connect", "generation": 2, "after": lost - 1}
    assert resumed[1]["kind"] == "event"
    assert resumed[1]["sequence"] == lost


# -- L4 over a subscriber log, line by line -------------------------------------------------


def _event(sequence: int, **data: object) -> SessionEvent:
    return SessionEvent(
        session_id="s",
        sequence=sequence,
        type="message.accepted",
        data=dict(data),
        created_at_ms=1000 + sequence,
    )


LEDGER = [_event(n, message_id=f"m{n}") for n in range(1, 5)]


def _line(kind: str, generation: int = 1, **fields: object) -> dict[str, object]:
    return {"kind": kind, "generation": generation, **fields}


def _received(event: SessionEvent, generation: int = 1) -> dict[str, object]:
    """The line a subscriber writes for ``event`` (as read back from its JSON log)."""
    return _line("event", generation, **json.loads(msgspec.json.encode(event)))


def _drained(tail: int, generation: int = 2, extra: int | None = None) -> dict[str, object]:
    return _line("drained", generation, tail=tail, reached=tail, extra=extra, error=None)


def _whole() -> list[dict[str, object]]:
    return [
        _line("connect", after=0),
        _received(LEDGER[0]),
        _received(LEDGER[1]),
        _line("connect", 2, after=2),
        _received(LEDGER[2], 2),
        _received(LEDGER[3], 2),
        _drained(4),
    ]


Edit = Callable[[list[dict[str, object]]], None]


def test_a_whole_log_across_a_kill_holds() -> None:
    assert judge_subscriber_log(_whole(), LEDGER, final_generation=2) == []


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        pytest.param(lambda log: log.pop(4), "a gap: received sequence 4 where 3", id="gap"),
        pytest.param(
            lambda log: log.insert(4, _received(LEDGER[1], 2)), "a duplicate", id="duplicate"
        ),
        pytest.param(
            lambda log: log.__setitem__(3, _line("connect", 2, after=1)),
            "reconnected from 1, its last recorded event was 2",
            id="resumed-elsewhere",
        ),
        pytest.param(
            lambda log: log.__setitem__(2, _received(_event(2, message_id="other"))),
            "the ledger holds",
            id="changed-since",
        ),
        pytest.param(
            lambda log: log.insert(6, _received(_event(5), 2)),
            "which the ledger does not hold",
            id="phantom",
        ),
        pytest.param(lambda log: log.pop(), "never drained", id="no-drain"),
        pytest.param(
            lambda log: log.__setitem__(6, _drained(4, extra=5)), "found 5 more", id="more"
        ),
        pytest.param(
            lambda log: log.__setitem__(6, _drained(3)), "tail was 3 of 4", id="short-tail"
        ),
    ],
)
def test_each_way_a_subscriber_can_go_wrong_is_named(edit: Edit, words: str) -> None:
    log = _whole()
    edit(log)
    found = judge_subscriber_log(log, LEDGER, final_generation=2)
    assert any(v.invariant == "L4" and words in v.detail for v in found), found


# -- the sweep's command line ---------------------------------------------------------------


def test_the_sweep_reports_each_campaign_and_fails_on_a_mutant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # power_loss is the quickest campaign, but SQLite by nature: on a server, lifecycle_races.
    campaign = "power_loss" if on_sqlite() else "lifecycle_races"
    assert main(["--campaign", campaign, "--seeds", "2"]) == 0
    table = capsys.readouterr().out
    assert "findings by check" in table
    assert campaign in table
    argv = ["--campaign", campaign, "--seeds", "1", "--start", "2"]
    assert main([*argv, "--mutant", "sequence_gap_at_each_acceptance"]) == 1
    assert re.search(r"\bL1 [1-9]", capsys.readouterr().out), "the gap is named L1"


def test_a_campaign_refuses_a_mutant_it_cannot_install() -> None:
    with pytest.raises(ValueError, match="lifecycle_races cannot install the mutant 'lying_sync'"):
        run_seed("lifecycle_races", 0, "lying_sync")


def test_a_line_a_kill_cut_short_is_skipped_only_as_its_process_s_last(tmp_path: Path) -> None:
    """A SIGKILL can cut one ``write(2)`` short where the line crosses a page (the kernel stops
    copying at a fatal signal): the next generation ends the torn line before it appends, and
    the reader skips it — as a kill between receiving and recording would have left it. A line
    that does not parse anywhere else is a broken log."""
    from agentkeep.chaos.ledger_subscriber import SubscriberLog, _end_a_torn_line

    log = tmp_path / "subscriber.jsonl"
    whole = json.dumps({"kind": "event", "generation": 1, "sequence": 1})
    torn = json.dumps({"kind": "event", "generation": 1, "sequence": 2})[:20]
    log.write_text(whole + "\n" + torn)
    assert [line["sequence"] for line in SubscriberLog(log).lines()] == [1]  # the file's last

    fd = os.open(log, os.O_RDWR | os.O_APPEND)
    try:
        _end_a_torn_line(fd)  # the next generation's subscriber opens the log
        _end_a_torn_line(fd)  # a whole last line is left as it is
        os.write(fd, json.dumps({"kind": "event", "generation": 2, "sequence": 2}).encode())
        os.write(fd, b"\n")
    finally:
        os.close(fd)
    lines = list(SubscriberLog(log).lines())
    assert [(line["generation"], line["sequence"]) for line in lines] == [(1, 1), (2, 2)]

    log.write_text(whole + "\n" + torn + "\n" + whole + "\n")  # torn inside one generation
    with pytest.raises(json.JSONDecodeError):
        list(SubscriberLog(log).lines())
