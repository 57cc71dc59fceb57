"""Tool lifetime flags and ``ctx.commit`` (invariants I17, I18).

- ``transactional=True``: execute, validation, rendering and the result's commit in one store
  transaction; a raise rolls the tool's writes back.
- ``ctx.commit(result)``: the first commit wins, the later return or raise is ignored, the call
  store is erased with it, and a committed call survives a crash without running again.
- ``reloadable`` / ``steerable``: a drain leaves a reloadable call pending for the next
  process; steering and a drain answer a steerable call at once (the interleavings at the
  edges of a call's life: ``test_tool_lifetime_races``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

import agentkeep as ak
from agentkeep.persistence.interface import Transaction
from agentkeep.persistence.kv_keys import scope_prefix
from agentkeep.providers import script
from agentkeep.types import TextBlock, ToolCallBlock, ToolResultMessage
from agentkeep.types.records import BlockRecord, OwedWork, PendingToolCall, UserRecord

from .conftest import EchoArgs, Gate, World, text_of

STEERED = "The tool call was interrupted by new steering."
DRAINED = "The tool call was interrupted by a shutdown."


def tool_results(system: ak.AgentSystem, agent_id: str) -> list[tuple[str, str, bool]]:
    return [
        (m.call_id, text_of(m), m.is_error)
        for m in system.transcript(agent_id)
        if isinstance(m, ToolResultMessage)
    ]


def call_kv(system: ak.AgentSystem, agent_id: str, call_id: str) -> list[tuple[str, Any]]:
    """The raw kv entries of the pending call whose provider id is ``call_id``."""

    def read(tx: Transaction) -> list[tuple[str, Any]]:
        pending = {p.call.call_id: p.internal_id for p in tx.calls.pending(agent_id)}
        prefix = scope_prefix("agent", agent_id, "call", pending[call_id])
        return tx.kv.scan(prefix)

    return system.internals.store.read(read)


def pending(system: ak.AgentSystem, agent_id: str) -> list[PendingToolCall]:
    return system.internals.store.read(lambda tx: tx.calls.pending(agent_id))


def held_first(world: World, second: str) -> None:
    """The model calls ``wait`` (held at gate "hold") then ``second``: the second call's
    result cannot land before the first's, so its durable state can be read in between."""
    world.model.add(
        script.tool_calls(
            script.call("wait", {"text": "hold"}, call_id="c1"),
            script.call(second, {}, call_id="c2"),
        ),
        script.text("done"),
    )


# -- transactional ----------------------------------------------------------------------------


def test_a_transactional_tool_that_raises_leaves_none_of_its_kv_writes(world: World) -> None:
    @ak.tool(transactional=True)
    def atomic(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Write, then fail."""
        ctx.kv.write("effect", "written")
        raise RuntimeError("changed my mind")

    @ak.tool
    def plain(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Write, then fail, without a transaction."""
        ctx.kv.write("effect", "written")
        raise RuntimeError("changed my mind")

    for name in ("atomic", "plain"):
        world.model.add(
            script.tool_calls(
                script.call("wait", {"text": name}, call_id=f"{name}-1"),
                script.call(name, {}, call_id=f"{name}-2"),
            ),
            script.text("done"),
        )
    finished = Finished()
    system = world.open(tools=[*world.tools(), atomic, plain], features=[finished])
    agent = system.create()
    for name in ("atomic", "plain"):
        agent.send(ak.user(name))
        gate = world.gate(name)
        assert gate.entered.wait(10)
        # The failing call finished (its result waits behind the held call), so what it
        # wrote is what stays: nothing for the transactional tool, the write for the other.
        assert finished.event(f"{name}-2").wait(10)
        entries = [value for _, value in call_kv(system, agent.id, f"{name}-2")]
        assert entries == ([] if name == "atomic" else ["written"]), name
        gate.release.set()
        assert agent.wait_for_idle(timeout_seconds=10)

    results = tool_results(system, agent.id)
    assert results[1] == ("atomic-2", 'The tool "atomic" failed: changed my mind', True)
    assert results[3] == ("plain-2", 'The tool "plain" failed: changed my mind', True)


def test_a_transactional_tool_s_sends_commit_with_its_result_or_not_at_all(
    world: World,
) -> None:
    @ak.tool(transactional=True)
    def notify(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Tell agentb, then fail if asked to."""
        ctx.system.resolve("agentb").send(ak.user(f"note {args.text}"), id=f"note{args.text}")
        if args.text == "fail":
            raise RuntimeError("no")
        return f"told {args.text}"

    world.model.add(
        script.tool_calls(
            script.call("notify", {"text": "fail"}, call_id="n1"),
            script.call("notify", {"text": "ok"}, call_id="n2"),
        ),
        script.text("done"),
        script.text("b answers"),
    )
    system = world.open(tools=[notify])
    receiver = system.create(id="agentb")
    agent = system.create(id="agenta")
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)
    assert receiver.wait_for_idle(timeout_seconds=10)

    assert [r[1] for r in tool_results(system, "agenta")] == [
        'The tool "notify" failed: no',
        "told ok",
    ]
    heard = [text_of(m) for m in system.transcript("agentb") if isinstance(m, ak.UserMessage)]
    assert heard == ["note ok"]  # the failed call's send rolled back with its writes


def test_a_transactional_tool_s_result_is_committed_in_its_transaction(world: World) -> None:
    @ak.tool(transactional=True)
    def atomic(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Write and answer."""
        ctx.kv.write("effect", "written")
        return "atomic done"

    held_first(world, "atomic")
    finished = Finished()
    system = world.open(tools=[*world.tools(), atomic], features=[finished])
    agent = system.create()
    agent.send(ak.user("go"))
    assert world.gate("hold").entered.wait(10)
    assert finished.event("c2").wait(10)
    # Before the batch reaches it, the result is already durable (claimed with the call,
    # the call's store erased in the same transaction).
    claimed = {p.call.call_id: p.committed for p in pending(system, agent.id)}
    assert claimed["c1"] is None
    assert claimed["c2"] is not None
    assert text_of(claimed["c2"]) == "atomic done"
    assert call_kv(system, agent.id, "c2") == []
    world.gate("hold").release.set()
    assert agent.wait_for_idle(timeout_seconds=10)
    assert [r[1] for r in tool_results(system, agent.id)] == ["waited hold", "atomic done"]


def test_a_transactional_tool_runs_on_the_writer_and_may_not_open_its_own_transaction(
    world: World,
) -> None:
    @ak.tool(transactional=True)
    def spawn(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Create an agent (needs a transaction of its own)."""
        ctx.system.create(id="childx")
        return "created"

    world.model.add(script.tool_calls(script.call("spawn", {}, call_id="s1")), script.text("ok"))
    system = world.open(tools=[spawn])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)
    (result,) = tool_results(system, agent.id)
    assert result[2]
    assert "inside a transaction" in result[1]
    with pytest.raises(ak.UnknownAgentError):
        system.resolve("childx")


# -- ctx.commit -----------------------------------------------------------------------------


def test_a_commit_then_a_raise_keeps_the_committed_result_and_erases_the_call_store(
    world: World,
) -> None:
    after_commit = Gate()
    seen: dict[str, Any] = {}

    @ak.tool
    def saver(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Write, commit, then fail."""
        ctx.kv.write("progress", "half")
        seen["won"] = ctx.commit("saved early")
        seen["again"] = ctx.commit("saved twice")
        try:
            ctx.kv.write("progress", "late")
        except ak.ExpiredScopeError:
            seen["kv_expired"] = True
        after_commit.wait()
        raise RuntimeError("too late to matter")

    world.model.add(script.tool_calls(script.call("saver", {}, call_id="c1")), script.text("ok"))
    system = world.open(tools=[saver])
    agent = system.create()
    agent.send(ak.user("go"))
    assert after_commit.entered.wait(10)
    (claimed,) = pending(system, agent.id)
    assert claimed.committed is not None
    assert text_of(claimed.committed) == "saved early"
    assert call_kv(system, agent.id, "c1") == []  # erased in the commit's transaction
    after_commit.release.set()
    assert agent.wait_for_idle(timeout_seconds=10)

    assert seen == {"won": True, "again": False, "kv_expired": True}
    assert tool_results(system, agent.id) == [("c1", "saved early", False)]


def test_the_first_commit_wins_over_the_tool_s_return(world: World) -> None:
    @ak.tool
    def twice(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Commit twice, return a third answer."""
        assert ctx.commit("first")
        assert not ctx.commit("second")
        return "returned"

    world.model.add(script.tool_calls(script.call("twice", {}, call_id="c1")), script.text("ok"))
    system = world.open(tools=[twice])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)
    assert tool_results(system, agent.id) == [("c1", "first", False)]


def test_a_commit_of_a_result_of_the_wrong_type_is_refused(world: World) -> None:
    refusals: list[str] = []

    @ak.tool
    def typed(ctx: ak.ToolContext, args: EchoArgs) -> int:
        """Commit a string although the result is an int."""
        try:
            ctx.commit("not a number")
        except ak.ToolCommitError as error:
            refusals.append(str(error))
        return 7

    world.model.add(script.tool_calls(script.call("typed", {}, call_id="c1")), script.text("ok"))
    system = world.open(tools=[typed])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)
    assert len(refusals) == 1
    assert "did not match its declared type" in refusals[0]
    assert tool_results(system, agent.id) == [("c1", "7", False)]


def test_a_commit_inside_a_transactional_tool_rolls_back_with_its_raise(world: World) -> None:
    @ak.tool(transactional=True)
    def undone(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Commit, then fail: the whole transaction goes."""
        assert ctx.commit("committed inside")
        raise RuntimeError("rolled back")

    world.model.add(script.tool_calls(script.call("undone", {}, call_id="c1")), script.text("ok"))
    system = world.open(tools=[undone])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)
    assert tool_results(system, agent.id) == [("c1", 'The tool "undone" failed: rolled back', True)]


def test_a_committed_call_left_by_a_crash_lands_in_batch_order_and_never_runs_again(
    world: World,
) -> None:
    # What a process that died right after ``ctx.commit`` leaves: the batch, one call
    # committed (the second), the first not.
    runs: list[str] = []

    @ak.tool(durable=True)
    def count(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Count a run."""
        runs.append(args.text)
        return f"ran {args.text}"

    calls = [
        ToolCallBlock(call_id="c1", name="count", arguments='{"text": "one"}'),
        ToolCallBlock(call_id="c2", name="count", arguments='{"text": "two"}'),
    ]
    saved = ToolResultMessage(call_id="c2", content=(TextBlock(text="saved before the crash"),))

    def write(tx: Transaction) -> None:
        tx.records.append("agentx", UserRecord(message_id="m1", message=ak.user("go")))
        for call in calls:
            tx.records.append("agentx", BlockRecord(block=call))
        tx.calls.put(
            "agentx",
            [PendingToolCall(internal_id=f"i{n}", index=n, call=c) for n, c in enumerate(calls)],
        )
        tx.calls.claim_result("agentx", "i1", saved)
        tx.calls.mark_committed("agentx", "i1", saved)
        tx.facts.write_owed("agentx", OwedWork(stage="tools"))

    seeding = world.open()
    seeding.create(id="agentx")
    seeding.internals.store.transact(write)
    seeding.close()
    world.model.add(script.text("after resume"))
    system = world.open(tools=[count])
    system.wait_for_idle("agentx", timeout_seconds=10)
    assert runs == ["one"]
    assert tool_results(system, "agentx") == [
        ("c1", "ran one", False),
        ("c2", "saved before the crash", False),
    ]


def test_a_call_committed_before_its_system_closed_mid_call_is_not_run_after_reopening(
    world: World,
) -> None:
    held = Gate()
    runs: list[str] = []

    @ak.tool
    def saver(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Commit, then run on until the close cancels the call."""
        runs.append(ctx.call_id)
        assert ctx.commit("saved before closing")
        held.entered.set()
        ctx.cancel.wait_cancelled(30)
        return "returned after closing"

    world.model.add(script.tool_calls(script.call("saver", {}, call_id="c1")))
    system = world.open(tools=[saver])
    agent = system.create()
    agent.send(ak.user("go"))
    assert held.entered.wait(10)
    # The call is still running: the close gives up waiting for it and stops the agent
    # (its call cancelled), as a process ending mid-call would.
    system.close(timeout_seconds=0.5)

    world.model.add(script.text("after reopening"))
    reopened = world.open(tools=[saver])
    reopened.start(agent.id)
    assert reopened.wait_for_idle(agent.id, timeout_seconds=10)
    assert len(runs) == 1
    assert tool_results(reopened, agent.id) == [("c1", "saved before closing", False)]


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import agentkeep as ak
    from agentkeep.providers import script
    from tests.unit.loop.conftest import EchoArgs

    home, marker = sys.argv[1], sys.argv[2]

    @ak.tool
    def saver(ctx: ak.ToolContext, args: EchoArgs) -> str:
        '''Commit, then die before returning.'''
        ctx.kv.write("progress", "half")
        assert ctx.commit("saved before the kill")
        with open(marker, "a") as out:
            out.write("ran\\n")
            out.flush()
            os.fsync(out.fileno())
        os.kill(os.getpid(), signal.SIGKILL)
        return "never"

    model = ak.ScriptedModel()
    model.add(script.tool_calls(script.call("saver", {}, call_id="c1")))
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    system = ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", tools=[saver]
    )
    system.create(id="killed").send(ak.user("go"))
    system.wait_for_idle("killed", timeout_seconds=30)
    sys.exit(3)  # never reached: the tool kills the process
    """
)


def test_a_call_committed_before_a_sigkill_keeps_its_result_and_never_runs_again(
    tmp_path: Path,
) -> None:
    home, marker = tmp_path / "state", tmp_path / "runs.txt"
    root = Path(__file__).resolve().parents[3]
    # The inherited path stays (on the PostgreSQL pass it opens the child's store there).
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "src"), str(root), *inherited]))
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(home), str(marker)],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    assert marker.read_text() == "ran\n"

    runs: list[str] = []

    @ak.tool
    def saver(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """The same tool in the next process: must not run."""
        runs.append("again")
        return "ran again"

    model = ak.ScriptedModel()
    model.add(script.text("after the kill"))
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    system = ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", tools=[saver]
    )
    try:
        assert system.wait_for_idle("killed", timeout_seconds=10)
        assert runs == []
        assert tool_results(system, "killed") == [("c1", "saved before the kill", False)]
        assert [text_of(m) for m in system.transcript("killed")][-1] == "after the kill"
    finally:
        system.close(timeout_seconds=10)


# -- steerable and reloadable ------------------------------------------------------------------


class Seen:
    """What tools noted, in order; a test waits for the n-th note without sleeping."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self._changed = threading.Condition()

    def append(self, note: str) -> None:
        with self._changed:
            self.notes.append(note)
            self._changed.notify_all()

    def wait_for(self, count: int, timeout_seconds: float = 10) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.notes) >= count, timeout_seconds)


def cancellable(name: str, seen: Seen, **flags: bool) -> ak.Tool[Any, Any]:
    """A tool that runs until its call is cancelled, noting each run and its cancellation."""

    @ak.tool(name=name, **flags)
    def until_cancelled(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Run until cancelled."""
        # Noted once the write landed: a drain or a steer may cancel the call at any moment
        # after it started, and its store expires with the cancel (a later write is refused:
        # the tool would raise and never note its cancellation). A test that waits for the
        # run therefore knows the write is durable before it interrupts the call.
        ctx.kv.write("attempts", (ctx.kv.read("attempts") or 0) + 1)
        seen.append(f"run {ctx.call_id}")
        assert ctx.cancel.wait_cancelled(30), "never cancelled"
        seen.append(f"cancelled {ctx.call_id}")
        return "returned late"

    return until_cancelled


def test_new_steering_interrupts_a_steerable_call(world: World) -> None:
    seen = Seen()
    watch = cancellable("watch", seen, steerable=True)
    world.model.add(
        script.tool_calls(script.call("watch", {}, call_id="c1")), script.text("steered")
    )
    finished = Finished()
    system = world.open(tools=[watch], features=[finished])
    agent = system.create()
    agent.send(ak.user("go"))
    seen.wait_for(1)
    agent.steer(ak.user("change course"))
    assert agent.wait_for_idle(timeout_seconds=10)
    assert finished.event("c1").wait(10)

    assert tool_results(system, agent.id) == [("c1", STEERED, True)]
    seen.wait_for(2)
    assert seen.notes[1].startswith("cancelled")  # its lifetime ended; the late return is ignored
    transcript = system.transcript(agent.id)
    assert [text_of(m) for m in transcript][-2:] == ["change course", "steered"]


def test_steering_leaves_an_ordinary_call_running(world: World) -> None:
    world.model.add(
        script.tool_calls(script.call("wait", {"text": "g"}, call_id="c1")), script.text("done")
    )
    system = world.open()
    agent = system.create()
    agent.send(ak.user("go"))
    assert world.gate("g").entered.wait(10)
    agent.steer(ak.user("change course"))
    world.gate("g").release.set()
    assert agent.wait_for_idle(timeout_seconds=10)
    assert tool_results(system, agent.id) == [("c1", "waited g", False)]


def test_a_drain_settles_a_steerable_call_and_waits_for_an_ordinary_one(world: World) -> None:
    seen = Seen()
    watch = cancellable("watch", seen, steerable=True)
    world.model.add(
        script.tool_calls(
            script.call("watch", {}, call_id="c1"),
            script.call("wait", {"text": "g"}, call_id="c2"),
        ),
        script.text("after restart"),
    )
    system = world.open(tools=[*world.tools(), watch])
    agent = system.create()
    agent.send(ak.user("go"))
    seen.wait_for(1)
    assert world.gate("g").entered.wait(10)
    stopping = threading.Thread(target=system.shutdown, kwargs={"timeout_seconds": 30})
    stopping.start()
    seen.wait_for(2)  # the drain interrupted the steerable call at once...
    assert stopping.is_alive()  # ...and waits for the ordinary one, still held
    world.gate("g").release.set()
    stopping.join(20)
    assert not stopping.is_alive()

    reopened = world.open(tools=[*world.tools(), watch])
    assert reopened.wait_for_idle(agent.id, timeout_seconds=10)
    assert tool_results(reopened, agent.id) == [
        ("c1", DRAINED, True),
        ("c2", "waited g", False),
    ]
    assert text_of(reopened.transcript(agent.id)[-1]) == "after restart"
    assert world.tool_runs == ["wait:g"]


def test_a_drain_leaves_a_reloadable_call_pending_and_the_next_process_runs_it_again(
    world: World,
) -> None:
    seen = Seen()
    reload = cancellable("reload", seen, reloadable=True)
    world.model.add(
        script.tool_calls(
            script.call("reload", {}, call_id="c1"),
            script.call("echo", {"text": "x"}, call_id="c2"),
        ),
        script.text("after restart"),
    )
    finished = Finished()
    system = world.open(tools=[*world.tools(), reload], features=[finished])
    agent = system.create()
    agent.send(ak.user("go"))
    seen.wait_for(1)
    assert finished.event("c2").wait(10)  # its result waits behind the reloadable call
    system.shutdown(timeout_seconds=30)
    seen.wait_for(2)
    assert seen.notes[1].startswith("cancelled")
    (first_id,) = {entry.split()[1] for entry in seen.notes}

    calls_run: list[str] = []

    @ak.tool(name="reload", reloadable=True)
    def reloaded(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """The next process's run: the same call, its store kept."""
        calls_run.append(ctx.call_id)
        return f"reloaded after {ctx.kv.read('attempts')} attempt"

    reopened = world.open(tools=[*world.tools(), reloaded])
    # Before it runs again, the call is still pending, without a result; the echo's result
    # was claimed by the drain.
    assert reopened.wait_for_idle(agent.id, timeout_seconds=10)
    assert calls_run == [first_id]  # the same call id, run again
    assert world.tool_runs == ["echo:x"]  # the ordinary call ran once
    assert tool_results(reopened, agent.id) == [
        ("c1", "reloaded after 1 attempt", False),
        ("c2", "echo x", False),
    ]
    assert text_of(reopened.transcript(agent.id)[-1]) == "after restart"


def test_an_abort_answers_a_reloadable_call_as_aborted(world: World) -> None:
    seen = Seen()
    reload = cancellable("reload", seen, reloadable=True)
    world.model.add(script.tool_calls(script.call("reload", {}, call_id="c1")))
    system = world.open(tools=[reload])
    agent = system.create()
    agent.send(ak.user("go"))
    seen.wait_for(1)
    agent.abort()
    assert agent.wait_for_idle(timeout_seconds=10)
    assert tool_results(system, agent.id) == [("c1", "The tool call was aborted.", True)]


# -- helpers --------------------------------------------------------------------------------


class Finished(ak.Feature):
    """Signals each call whose work is over (``after_tool_call`` runs after the tool, and
    after a transactional tool's transaction, returned)."""

    name = "finished"

    def __init__(self) -> None:
        self.calls: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def event(self, call_id: str) -> threading.Event:
        with self._lock:
            return self.calls.setdefault(call_id, threading.Event())

    def after_tool_call(
        self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: ak.ToolCallResult
    ) -> None:
        self.event(call.provider_call_id).set()
