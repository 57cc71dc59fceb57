"""The crash rule (docs/drivers.md), with a real SIGKILL: an injected driver's live turns are
``interrupted`` at the next open and never replayed (the native driver resumes instead)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.actors.supervisor import Backoff
from agentkeep.drivers import DriverContextClosedError, DriverResult
from agentkeep.persistence.writer import StoreWriter

from .conftest import DriverWorld, Gated, Scripted

SRC = Path(__file__).resolve().parents[3] / "src"

# Opens the system with a driver that records each run() in a file, emits one event and
# blocks for ever; sends two turns (the second waits behind the first) and reports.
_OWNER = """
import sys, time
from pathlib import Path
import structlog
structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
import agentkeep as ak

home, calls = sys.argv[1], Path(sys.argv[2])


def say(line):
    # One write per line (two threads report): lines never interleave.
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()


class Recorder:
    id = "remote"

    def run(self, request, context):
        with calls.open("a") as f:
            f.write(request.turn.id + "\\n")
        context.emit("progress", {"step": 1})
        say("running " + request.turn.id)
        while True:
            time.sleep(1)

providers = ak.Providers()
providers.add("local", ak.ScriptedModel(), kind="gym")
system = ak.AgentSystem.open(
    home, providers=providers, provider="local", model="gym-1", drivers=[Recorder()]
)
system.registry.create({"id": "remote", "driver": {"id": "remote"}})
session = system.sessions.start("remote")
first = system.sessions.send(session.id, "one", idempotency_key="k1")
second = system.sessions.send(session.id, "two", idempotency_key="k2")
say(f"sent {session.id} {first.turn.id} {second.turn.id}")
sys.stdin.read()
"""


def test_a_sigkilled_driver_turn_is_interrupted_and_never_run_again(
    world: DriverWorld, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.txt"
    # Keep PYTHONPATH's entries (the PostgreSQL pass puts its sitecustomize there).
    path = os.pathsep.join(p for p in [str(SRC), os.environ.get("PYTHONPATH", "")] if p)
    env = {**os.environ, "PYTHONPATH": path}
    with subprocess.Popen(
        [sys.executable, "-c", _OWNER, str(world.home), str(calls)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    ) as owner:
        try:
            assert owner.stdout is not None
            # Two lines, in either order (the run prints from its own thread).
            lines = {
                words[0]: words[1:] for words in (owner.stdout.readline().split() for _ in "ab")
            }
            session_id, first_id, second_id = lines["sent"]
            assert lines["running"] == [first_id]
        finally:
            owner.send_signal(signal.SIGKILL)
            owner.wait(30)
    assert owner.returncode == -signal.SIGKILL
    assert calls.read_text().split() == [first_id]

    reopened = Scripted("remote", lambda request, context: DriverResult())
    system = world.open([reopened])
    first = system.sessions.turn(session_id, first_id)
    second = system.sessions.turn(session_id, second_id)
    assert (first.status, second.status) == ("interrupted", "interrupted")
    assert first.error is not None
    assert first.error.code == "interrupted"
    assert first.started_at_ms is not None
    assert second.started_at_ms is None
    ledger = [(e.type, e.turn_id) for e in system.events(session_id, limit=1000)]
    # The second send may commit before or after the first turn started running, or after
    # its progress; the first turn's own events keep their order.
    assert sorted(ledger[:6]) == sorted(
        [
            ("turn.queued", first_id),
            ("message.accepted", first_id),
            ("turn.queued", second_id),
            ("message.accepted", second_id),
            ("turn.running", first_id),
            ("progress", first_id),  # committed before the kill: it stays
        ]
    )
    first_turn = [event for event in ledger[:6] if event[1] == first_id]
    assert [kind for kind, _ in first_turn][-2:] == ["turn.running", "progress"]
    assert ledger[6:] == [("turn.interrupted", first_id), ("turn.interrupted", second_id)]
    # A repeated key returns the interrupted turn; nothing runs it again.
    again = system.sessions.send(session_id, "one", idempotency_key="k1")
    assert again.duplicate
    assert again.turn.status == "interrupted"
    # A new turn runs (the driver is called for it alone).
    fresh = system.sessions.send(session_id, "three").wait(timeout_seconds=10)
    assert fresh.status == "completed"
    assert [r.turn.id for r in reopened.requests] == [fresh.id]
    assert calls.read_text().split() == [first_id]


class _WriterBugError(RuntimeError):
    """Raised inside the store writer's actor on purpose (a bug outside any transaction)."""


def test_a_writer_failure_restarts_the_runners_which_interrupt_the_running_turn(
    world: DriverWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer fails once, on demand: the system supervisor restarts it and every tier
    # after it (rest_for_one), the drivers' included. The run in flight cannot be stopped
    # (a thread), so it is cut off: interrupted, never replayed, writing nothing more; the
    # session's queued turn then runs on the new runner.
    armed = [0]
    original = StoreWriter._run_group

    def run_group(writer: StoreWriter, pending: Any) -> None:
        if armed[0] > 0:
            armed[0] -= 1
            raise _WriterBugError("the store writer broke")
        original(writer, pending)

    monkeypatch.setattr(StoreWriter, "_run_group", run_group)
    driver = Gated("remote", honour=False)
    world.released.extend(driver.release)
    system = world.open([driver], restart_backoff=Backoff(initial_seconds=0))
    session_id = world.session(system, "remote")
    first = system.sessions.send(session_id, "one")
    second = system.sessions.send(session_id, "two")
    assert driver.started[0].wait(10)

    armed[0] = 1
    with pytest.raises(ak.CommitOutcomeUnknownError):
        system.internals.store.transact(lambda tx: tx.kv.read("probe"))

    driver.release[1].set()
    assert second.wait(timeout_seconds=20).status == "completed"
    interrupted = system.sessions.turn(session_id, first.turn.id)
    assert interrupted.status == "interrupted"
    with pytest.raises(DriverContextClosedError):
        driver.contexts[0].emit("progress", {"late": True})
    driver.release[0].set()
    assert driver.returned[0].wait(10)
    assert [r.turn.id for r in driver.requests] == [first.turn.id, second.turn.id]
    assert system.sessions.turn(session_id, first.turn.id).status == "interrupted"
    assert "progress" not in [e.type for e in system.events(session_id, limit=1000)]
    assert system.failure is None
