"""``agentkeep chaos list`` and ``agentkeep chaos run``: suites, seeds, summary, failures."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest

from agentkeep.chaos import campaigns, power, process_kills
from agentkeep.chaos.campaigns import CampaignResult
from agentkeep.chaos.invariants import INVARIANTS, Violation
from agentkeep.chaos.process_kills import KillCampaignResult

ALL_SUITES = [
    *campaigns.SUITES,
    "process_kills",
    "power_loss",
    "pg_server_faults",
    "worker_failover",
]
SERVER_ONLY = ("pg_server_faults", "worker_failover")


def error_of(result: Any) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(result.stderr)["error"]
    return error


def summary_rows(stdout: str) -> dict[str, list[str]]:
    """The summary table's rows by suite: [seeds, failed, seconds]."""
    lines = stdout.splitlines()
    header = max(
        i for i, line in enumerate(lines) if line.split()[:3] == ["suite", "seeds", "failed"]
    )
    return {line.split()[0]: line.split()[1:] for line in lines[header + 1 :]}


@pytest.fixture
def played(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``queues`` replaced by a fake that records its seeds and breaks invariant I1 at seed 1."""
    seeds: list[int] = []

    def fake(seed: int) -> CampaignResult:
        seeds.append(seed)
        result = CampaignResult(suite="queues", seed=seed, processes=["process 1: crashed"])
        if seed == 1:
            detail = "message q2 is in the conversation twice"
            result.violations.append(Violation(invariant=1, process=2, detail=detail))
        return result

    monkeypatch.setitem(campaigns.SUITES, "queues", fake)
    return seeds


# -- chaos list --------------------------------------------------------------------------------


def test_chaos_list_names_every_suite_with_its_run_command(invoke: Any) -> None:
    result = invoke("chaos", "list")
    assert result.exit_code == 0, result.output
    for name in ALL_SUITES:
        assert f"agentkeep chaos run --suite {name} --seeds" in result.stdout


def test_chaos_list_json_describes_every_suite(invoke: Any) -> None:
    result = invoke("chaos", "list", json_mode=True)
    assert result.exit_code == 0, result.output
    suites = json.loads(result.stdout)["suites"]
    assert [s["name"] for s in suites] == ALL_SUITES
    assert set(suites[0]) == {"name", "kind", "description", "default_seeds", "run", "sweep"}
    kinds = {s["name"]: s["kind"] for s in suites}
    assert kinds["queues"] == "in-process"
    assert kinds["process_kills"] == "processes"
    assert kinds["power_loss"] == "power-loss"
    assert kinds["pg_server_faults"] == "server-faults"
    assert kinds["worker_failover"] == "workers"
    assert all(s["description"] and s["default_seeds"] > 0 for s in suites)


# -- chaos run: passing ------------------------------------------------------------------------


def test_a_passing_run_prints_the_summary_and_exits_0(invoke: Any) -> None:
    result = invoke("chaos", "run", "--suite", "queues", "--seeds", "2")
    assert result.exit_code == 0, result.output
    assert summary_rows(result.stdout)["queues"][:2] == ["2", "0"]
    assert "FAILED" not in result.stdout
    # The progress bar goes to stderr (on a non-TTY: its label once), never to stdout.
    assert "chaos: 2 seed(s) of 1 suite(s)" in result.stderr
    assert "chaos:" not in result.stdout


@pytest.mark.sqlite_only("the power_loss suite cuts power under SQLite's own VFS")
def test_a_real_process_and_a_power_loss_seed_run_from_the_cli(invoke: Any) -> None:
    result = invoke(
        "chaos", "run", "--suite", "power_loss", "--suite", "process_kills", "--seed", "3"
    )
    assert result.exit_code == 0, result.output
    rows = summary_rows(result.stdout)
    assert rows["power_loss"][:2] == ["1", "0"]
    assert rows["process_kills"][:2] == ["1", "0"]
    assert rows["total"][:2] == ["2", "0"]


@pytest.mark.slow
def test_the_server_faults_run_from_the_cli_on_the_given_server(
    invoke: Any, postgres_server: str
) -> None:
    """Seed 3 terminates and steals the writer's store twice on ``--database``'s server;
    its findings (``O1``/``O2`` among them) are the campaign's."""
    argv = ["--suite", "pg_server_faults", "--seed", "3", "--database", postgres_server]
    result = invoke("chaos", "run", *argv, json_mode=True)
    assert result.exit_code == 0, result.output
    (suite,) = json.loads(result.stdout)["suites"]
    assert (suite["suite"], suite["kind"], suite["seeds_run"], suite["failed"]) == (
        "pg_server_faults",
        "server-faults",
        1,
        0,
    )


@pytest.mark.slow
def test_the_worker_failover_runs_from_the_cli_on_the_given_server(
    invoke: Any, postgres_server: str
) -> None:
    """One seed of three real workers, SIGKILLed and SIGSTOPped past their lease, on
    ``--database``'s server: the campaign's checks (K1, K2, L1, T1, F1, F2) all hold, and the
    trace names each fault with its takeover time."""
    argv = ["--suite", "worker_failover", "--seed", "0", "--database", postgres_server]
    result = invoke("chaos", "run", *argv, json_mode=True)
    assert result.exit_code == 0, result.output
    (suite,) = json.loads(result.stdout)["suites"]
    assert (suite["suite"], suite["kind"], suite["seeds_run"], suite["failed"]) == (
        "worker_failover",
        "workers",
        1,
        0,
    )


def test_a_failover_problem_is_a_finding_with_its_check_named() -> None:
    from agentkeep.chaos import worker_fence  # noqa: F401  # registers K1, F1 and the others
    from agentkeep.cli.chaos_suites import _from_problem

    finding = _from_problem("F1: write #4 (a seq 2, partition 1) by w2, owner w1")
    assert finding.invariant == "F1"
    assert finding.name is not None
    assert "current owner" in finding.name


def test_a_server_fault_problem_is_a_finding_with_its_check_named() -> None:
    from agentkeep.chaos import pg_server  # noqa: F401  # registers O1 and O2
    from agentkeep.cli.chaos_suites import _from_problem

    finding = _from_problem("O1: owner b wrote again (write #3) after owner a")
    assert finding.invariant == "O1"
    assert finding.name is not None
    assert "ownership was lost" in finding.name


def test_every_suite_on_sqlite_leaves_the_server_campaigns_out(
    invoke: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of every suite without a server skips ``pg_server_faults`` and
    ``worker_failover`` (saying why); every other suite is faked to one passing seed, so only
    the selection is under test."""
    from agentkeep.chaos.backend import DATABASE_ENV
    from agentkeep.cli import chaos_suites

    real = chaos_suites.suites
    ran: list[str] = []

    def passing(name: str) -> Any:
        def run(seed: int) -> chaos_suites.Outcome:
            ran.append(name)
            return chaos_suites.Outcome(suite=name, seed=seed)

        return run

    def faked() -> dict[str, chaos_suites.Suite]:
        return {
            name: chaos_suites.Suite(
                suite.name, suite.kind, suite.description, 1, suite.sweep, passing(name)
            )
            for name, suite in real().items()
        }

    monkeypatch.setattr(chaos_suites, "suites", faked)
    monkeypatch.delenv(DATABASE_ENV, raising=False)
    monkeypatch.delenv("AGENTKEEP_DATABASE", raising=False)
    result = invoke("chaos", "run", "--seed", "0")
    assert result.exit_code == 0, result.output
    for name in SERVER_ONLY:
        assert f"{name}: skipped on SQLite" in result.stderr
    assert ran == [name for name in ALL_SUITES if name not in SERVER_ONLY]


def test_json_summary_has_a_stable_shape_and_stdout_holds_only_it(invoke: Any) -> None:
    result = invoke("chaos", "run", "--suite", "queues", "--seeds", "2", json_mode=True)
    assert result.exit_code == 0, result.output
    value = json.loads(result.stdout)  # nothing but the document on stdout
    assert set(value) == {"ok", "seeds_run", "failed", "seconds", "suites"}
    assert (value["ok"], value["seeds_run"], value["failed"]) == (True, 2, 0)
    (suite,) = value["suites"]
    assert set(suite) == {
        "suite",
        "kind",
        "first_seed",
        "seeds_run",
        "failed",
        "seconds",
        "failures",
    }
    assert (suite["suite"], suite["first_seed"], suite["seeds_run"]) == ("queues", 0, 2)
    assert suite["failures"] == []
    assert isinstance(suite["seconds"], float)


# -- which seeds -------------------------------------------------------------------------------


def test_seed_alone_replays_one_seed_and_with_seeds_is_the_first(
    invoke: Any, played: list[int]
) -> None:
    assert invoke("chaos", "run", "--suite", "queues", "--seed", "7").exit_code == 0
    assert invoke("chaos", "run", "--suite", "queues", "--seed", "4", "--seeds", "3").exit_code == 0
    assert invoke("chaos", "run", "--suite", "queues", "--seeds", "2").exit_code == 1  # seed 1
    assert played == [7, 4, 5, 6, 0, 1]


def test_without_seed_flags_chaos_seeds_from_the_environment_decide(
    invoke: Any, played: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAOS_SEEDS", "3")
    invoke("chaos", "run", "--suite", "queues")
    monkeypatch.setenv("CHAOS_SEED", "9")
    invoke("chaos", "run", "--suite", "queues")
    assert played == [0, 1, 2, 9]


@pytest.mark.parametrize("seeds", ["0", "-3"])
def test_seeds_below_one_are_refused(invoke: Any, played: list[int], seeds: str) -> None:
    result = invoke("chaos", "run", "--suite", "queues", "--seeds", seeds, json_mode=True)
    assert result.exit_code == 2
    assert error_of(result)["code"] == "invalid_seeds"
    assert played == []


def test_a_malformed_chaos_seeds_variable_is_bad_input(
    invoke: Any, played: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHAOS_SEEDS", "lots")
    result = invoke("chaos", "run", "--suite", "queues", json_mode=True)
    assert result.exit_code == 2
    assert error_of(result)["code"] == "invalid_seeds"


# -- unknown suites ----------------------------------------------------------------------------


def test_an_unknown_suite_is_refused_naming_the_known_ones(invoke: Any) -> None:
    result = invoke("chaos", "run", "--suite", "queues", "--suite", "nope", "--seeds", "1")
    assert result.exit_code == 2
    assert "Unknown chaos suite(s): nope." in result.stderr
    for name in ALL_SUITES:
        assert name in result.stderr
    assert result.stdout == ""


def test_an_unknown_suite_in_json_mode_is_a_json_error(invoke: Any) -> None:
    result = invoke("chaos", "run", "--suite", "nope", json_mode=True)
    assert result.exit_code == 2
    error = error_of(result)
    assert error["code"] == "unknown_suite"
    assert "power_loss" in error["hint"]


# -- chaos run: failing ------------------------------------------------------------------------


def test_a_violation_prints_the_seed_the_invariant_and_the_replay_and_exits_1(
    invoke: Any, played: list[int]
) -> None:
    result = invoke("chaos", "run", "--suite", "queues", "--seeds", "3")
    assert result.exit_code == 1
    out = result.stdout
    assert "FAILED queues seed 1: 1 violation(s)" in out
    assert "seed 0" not in out
    assert "seed 2" not in out
    assert f"§7.1 ({INVARIANTS[1]}) after process 2: message q2 is in the conversation twice" in out
    assert "process 1: crashed" in out
    assert "replay: agentkeep chaos run --suite queues --seed 1" in out
    assert "CHAOS_SEED=1 .venv/bin/pytest tests/chaos/test_queues.py" in out
    assert summary_rows(out)["queues"][:2] == ["3", "1"]


def test_a_violation_in_json_mode_names_seed_invariant_and_replay(
    invoke: Any, played: list[int]
) -> None:
    result = invoke("chaos", "run", "--suite", "queues", "--seeds", "3", json_mode=True)
    assert result.exit_code == 1
    value = json.loads(result.stdout)
    assert (value["ok"], value["seeds_run"], value["failed"]) == (False, 3, 1)
    (failure,) = value["suites"][0]["failures"]
    assert set(failure) == {"seed", "violations", "replay", "replay_pytest", "trace"}
    assert failure["seed"] == 1
    assert failure["replay"] == "agentkeep chaos run --suite queues --seed 1"
    assert failure["replay_pytest"] == "CHAOS_SEED=1 .venv/bin/pytest tests/chaos/test_queues.py"
    (violation,) = failure["violations"]
    assert violation["invariant"] == 1
    assert violation["name"] == INVARIANTS[1]
    assert "twice" in violation["description"]


@pytest.mark.sqlite_only("the power_loss suite cuts power under SQLite's own VFS")
def test_the_power_loss_mutant_fails_the_run_end_to_end(
    invoke: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A disk whose sync lies: acknowledged transactions vanish with the power (seed 0 shows it).
    mutant = partial(power.run_campaign, mutant=power.LYING_SYNC)
    monkeypatch.setattr(power, "run_campaign", mutant)
    result = invoke("chaos", "run", "--suite", "power_loss", "--seed", "0", json_mode=True)
    assert result.exit_code == 1
    (failure,) = json.loads(result.stdout)["suites"][0]["failures"]
    assert failure["replay"] == "agentkeep chaos run --suite power_loss --seed 0"
    assert any("lost by the cut" in v["description"] for v in failure["violations"])
    assert failure["trace"][0].startswith("plan: ")


def test_a_process_kill_problem_keeps_its_invariant_number(
    invoke: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = f"§7.12 ({INVARIANTS[12]}) after process 2: fragile_tool ran twice for call c1"

    def fake(seed: int) -> KillCampaignResult:
        return KillCampaignResult(seed=seed, problems=[problem, "process 3 exited 1: []"])

    monkeypatch.setattr(process_kills, "run_campaign", fake)
    result = invoke("chaos", "run", "--suite", "process_kills", "--seed", "5", json_mode=True)
    assert result.exit_code == 1
    (failure,) = json.loads(result.stdout)["suites"][0]["failures"]
    assert [v["invariant"] for v in failure["violations"]] == [12, None]
    assert failure["replay"] == "agentkeep chaos run --suite process_kills --seed 5"


def test_a_campaign_that_raises_is_a_failing_seed_not_a_crash(
    invoke: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(seed: int) -> CampaignResult:
        raise RuntimeError(f"harness broke at seed {seed}")

    monkeypatch.setitem(campaigns.SUITES, "compaction", broken)
    result = invoke("chaos", "run", "--suite", "compaction", "--seeds", "2")
    assert result.exit_code == 1
    assert "the campaign raised RuntimeError: harness broke at seed 1" in result.stdout
    assert "replay: agentkeep chaos run --suite compaction --seed 1" in result.stdout
    assert summary_rows(result.stdout)["compaction"][:2] == ["2", "2"]


def test_a_run_in_process_leaves_the_programs_logging_as_it_found_it(
    invoke: Any, played: list[int]
) -> None:
    """The campaign keeps only critical lines while it runs; afterwards the program that
    invoked the command line (a test, an embedder) logs as before — it once stayed silenced,
    and the access-log tests that ran after it in the same process saw no line."""
    import structlog
    from structlog.testing import capture_logs

    assert invoke("chaos", "list").exit_code == 0  # the command line's own logging set up
    before = structlog.get_config()["wrapper_class"]  # the level it filters at
    result = invoke("chaos", "run", "--suite", "queues", "--seeds", "1")
    assert result.exit_code == 0, result.output
    assert played == [0]
    assert structlog.get_config()["wrapper_class"] is before  # the campaign's silence ended
    with capture_logs() as logs:
        structlog.get_logger("agentkeep.after").warning("still_heard")
    assert [entry["event"] for entry in logs] == ["still_heard"]


def test_quiet_logs_leaves_an_unconfigured_structlog_unconfigured() -> None:
    """A campaign run in a program that had not configured structlog: restoring the saved
    values marked structlog configured with its defaults (every level, on stdout), so
    agentkeep's default logging was never installed after it — a later test in the same
    process saw a daemon's info lines in its stdout."""
    import structlog

    from agentkeep.chaos.quiet import quiet_logs
    from agentkeep.logs import install_default_logging

    saved = structlog.get_config() if structlog.is_configured() else None
    structlog.reset_defaults()
    try:
        with quiet_logs():
            assert structlog.is_configured()  # silenced while inside
        assert not structlog.is_configured()
        install_default_logging()  # what the next AgentSystem.open does
        assert structlog.is_configured()
        # agentkeep's (to stderr, or into the program's logging), not structlog's stdout one
        assert not isinstance(
            structlog.get_config()["logger_factory"], structlog.PrintLoggerFactory
        )
    finally:
        if saved is None:
            structlog.reset_defaults()
        else:
            structlog.configure(**saved)
