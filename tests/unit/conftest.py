"""The unit suite's slow part, named once: ``make test-fast`` runs ``-m "not slow"``.

The tests below spawn processes heavily — the CLI as a subprocess (in both modes: directly and
through a daemon), ``agentkeep serve``, a child owning a store, a SIGKILLed child, an MCP
server over stdio — or fuzz the daemon. Each such process pays Python's start-up and
agentkeep's imports, so these files are a few percent of the tests and most of the unit
suite's time. They stay in ``make test`` (what CI runs); the fast loop leaves them out.

An entry is a test file under ``tests/unit`` (every test in it) or ``file::function`` (that
test, every parameter). ``tests/unit/test_fast_loop.py`` fails when an entry no longer names
a file or a test, so a rename cannot silently put a slow test back into the fast loop.
"""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent

SLOW: tuple[str, ...] = (
    # the command line as a subprocess
    "cli/test_subprocess.py",
    "cli/test_new_user_script.py",
    "cli/test_off_the_happy_path.py",
    "cli/test_reads_while_owned.py",
    "cli/test_talk_signals.py",
    "cli/test_demo_daemon.py::test_the_demo_passes_as_a_real_process",
    "cli/test_chaos_cli.py::test_a_real_process_and_a_power_loss_seed_run_from_the_cli",
    "client/test_both_modes.py",
    "client/test_waits.py",
    "client/test_follow_while_owned.py",
    "client/test_owed_work_cli.py",
    "client/test_mcp_process.py",
    "client/test_structured_messages.py",
    "conformance/test_cli.py",
    "conformance/test_driver.py",
    "conformance/test_mcp.py",
    # agentkeep serve as a process, and the daemon under fuzzing and hostile clients
    "server/test_schemathesis.py",
    "server/test_hostile_clients.py",
    "server/test_hostile_daemon.py",
    "server/test_serve_process.py",
    "server/test_ready_file.py",
    # the console in a real headless Chromium over agentkeep serve as a process
    "console/test_console_browser.py",
    "console/test_session_report_browser.py",
    "cli/test_session_export.py",
    "test_readme_rest.py",
    # a child process killed, or owning a store
    "loop/test_held_block_sigkill.py",
    "loop/test_whole_answer.py",
    "loop/test_consume_at_acceptance.py::test_an_unknown_commit_outcome_of_a_consuming_acceptance_is_resumed",
    "loop/test_lifecycle_ids.py::test_a_sigkill_after_the_first_block_is_continued_with_the_same_loop_and_turn",
    "loop/test_tool_lifetime_flags.py::test_a_call_committed_before_a_sigkill_keeps_its_result_and_never_runs_again",
    "providers/vendors/test_agent_end_to_end.py::test_a_process_sigkilled_inside_a_tool_batch_resumes_with_a_byte_stable_replay",
    "persistence/test_lock.py",
    # a real PostgreSQL cluster started and stopped, and pytest sessions that start one
    "test_postgres_cluster.py::test_a_cluster_starts_serves_restarts_with_its_data_and_stops",
    "test_postgres_cluster.py::test_a_start_that_fails_leaves_no_server_and_quotes_the_log",
    "test_postgres_cluster.py::test_the_session_cluster_stops_even_when_a_test_failed",
    "test_postgres_cluster.py::test_the_sqlite_pass_skips_what_needs_postgres_and_starts_no_server",
    "test_postgres_cluster.py::test_demo_postgres_runs_the_demo_on_a_throwaway_cluster_or_says_why_it_cannot",
    "test_postgres_cluster.py::test_sqlite_only_without_a_reason_is_a_usage_error",
    "modules/test_migration_crash.py",
    "cli/test_message_input.py::test_the_console_script_reads_stdin_past_the_argv_limit",
    # serve, mcp and talk as processes with injected drivers; MCP over stdio
    "drivers/test_process_driver_serve.py",
    "mcp/test_stdio_process.py",
    "mcp/test_second_server.py",
    # orderings the pure core checks event by event (loop/test_machine_orderings.py); through
    # the actor shell they wait out a child's grace or a negative wait
    "loop/test_abort_and_failures.py::test_abort_during_a_tool_answers_it_aborted_without_waiting_and_the_queue_runs_after",
    "loop/test_lifecycle_concurrency.py::test_the_next_inference_waits_for_an_aborted_tool_to_unwind",
    "loop/test_tool_lifetime_races.py::test_steering_before_a_steerable_tool_started_answers_its_call_at_once",
    "loop/test_tool_lifetime_races.py::test_a_drain_before_a_steerable_tool_started_answers_its_call_at_once",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    files = {entry for entry in SLOW if "::" not in entry}
    tests = {entry for entry in SLOW if "::" in entry}
    for item in items:
        path = Path(str(item.path))
        if not path.is_relative_to(UNIT):
            continue
        relative = path.relative_to(UNIT).as_posix()
        name = getattr(item, "originalname", item.name)
        if relative in files or f"{relative}::{name}" in tests:
            item.add_marker(pytest.mark.slow)
