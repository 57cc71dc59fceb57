"""Durable KV state under a real SIGKILL of a real process.

- A crash inside a compaction's replacement transaction (after the history KV was erased and
  ``history_erased_transact`` wrote, before COMMIT): the history and its KV are both still
  there, and a compaction in the next process replaces them together.
- A crash while a durable tool runs: run again, its call-bound KV's ``get_or_create`` gives
  the operation id its first run allocated.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import agentkeep as ak
from agentkeep.features import Feature, HookContext
from agentkeep.persistence.readonly import ReadOnlyStore
from agentkeep.providers import script
from agentkeep.types.records import CompactionRecord, UserRecord

from .conftest import EchoArgs, World, printed, python_child, text_of

TOPIC = "agent.a1.history.feature.topic.topic"

# The child: agent a1 answers q1 (its before_turn notes a topic in the history KV), then is
# asked to compact; the compaction's history_erased_transact writes and hangs inside the
# replacement transaction, where the parent kills the process.
_CHILD = """
import json, sys, threading
import agentkeep as ak
from agentkeep.providers import script

class Topic(ak.Feature):
    name = "topic"
    def before_turn(self, ctx, turn):
        if ctx.history_kv.read("topic") is None:
            ctx.history_kv.write("topic", "the old history")
    def history_erased_transact(self, ctx):
        listed = ctx.history_kv.list()
        ctx.history_kv.write("topic", "written by the lost compaction")
        print(json.dumps(["erased", listed]), flush=True)
        threading.Event().wait()

model = ak.ScriptedModel()
model.add(script.text("a1"))
model.add_compactions(script.compacted(ak.user("summary")))
providers = ak.Providers()
providers.add("local", model, kind="gym")
system = ak.AgentSystem.open(sys.argv[1], providers=providers, provider="local",
                             model="gym-1", features=[Topic()])
agent = system.create(id="a1")
agent.send(ak.user("q1"))
agent.wait_for_idle(timeout_seconds=10)
agent.compact()
threading.Event().wait()
"""


class Topic(Feature):
    name = "topic"

    def __init__(self) -> None:
        self.erased: list[object] = []

    def history_erased_transact(self, ctx: HookContext) -> None:
        self.erased.append(ctx.history_kv.list())
        ctx.history_kv.write("topic", "the summary's")


def test_a_sigkill_inside_the_replacement_keeps_history_and_history_kv_together(
    tmp_path: Path,
) -> None:
    home = tmp_path / "state"
    with python_child(_CHILD, home) as child:
        told = next(printed(child), None)
        assert told == ["erased", []], "the child never reached history_erased_transact"
        os.kill(child.pid, signal.SIGKILL)  # inside the transaction: nothing commits

    store = ReadOnlyStore.open(home)
    try:
        records, topic = store.read(lambda tx: (tx.records.load("a1"), tx.kv.read(TOPIC)))
    finally:
        store.close()
    assert [type(r) for r in records][:1] == [UserRecord]
    assert not any(isinstance(r, CompactionRecord) for r in records)
    assert topic == "the old history"  # not erased without its history, nor overwritten

    world = World(home)
    world.model.add_compactions(script.compacted(ak.user("summary")))
    feature = Topic()
    system = world.open(features=[feature])
    try:
        assert system.wait_for_idle("a1", timeout_seconds=10)
        assert system.internals.store.read(lambda tx: tx.kv.read(TOPIC)) == "the old history"
        system.compact("a1", wait=True, timeout_seconds=10)  # a request dies with its process
        assert [text_of(m) for m in system.transcript("a1")] == ["summary"]
        assert feature.erased == [[]]
        after = system.internals.store.read(lambda tx: tx.kv.read(TOPIC))
        assert after == "the summary's"  # erased with the old history, then the hook's
    finally:
        system.close(timeout_seconds=10)


# The child: agent a1's model asks for the durable ``allocate`` tool, which allocates an
# operation id in its call-bound KV, prints it and hangs until the parent kills the process.
_TOOL_CHILD = """
import json, sys, threading
import msgspec
import agentkeep as ak
from agentkeep.providers import script

class Args(msgspec.Struct):
    pass

@ak.tool(durable=True)
def allocate(ctx: ak.ToolContext, args: Args) -> str:
    \"\"\"Allocate an operation id.\"\"\"
    op = ctx.kv.get_or_create("op", lambda: "op-first-run")
    print(json.dumps(["allocated", ctx.call_id, op]), flush=True)
    threading.Event().wait()
    return op

model = ak.ScriptedModel()
model.add(script.tool_call("allocate", {}))
providers = ak.Providers()
providers.add("local", model, kind="gym")
system = ak.AgentSystem.open(sys.argv[1], providers=providers, provider="local",
                             model="gym-1", tools=[allocate])
system.create(id="a1").send(ak.user("go"))
threading.Event().wait()
"""


def test_a_durable_call_run_again_after_a_sigkill_gets_the_id_its_first_run_allocated(
    tmp_path: Path,
) -> None:
    """``get_or_create`` on a call's KV: a retry-stable operation identity, with no heap
    state and no provider call id."""
    home = tmp_path / "state"
    with python_child(_TOOL_CHILD, home) as child:
        told = next(printed(child), None)
        assert told is not None, "the child never ran its tool"
        _, call_id, first = told
        os.kill(child.pid, signal.SIGKILL)
    assert first == "op-first-run"

    runs: list[tuple[str, str]] = []

    @ak.tool(durable=True)
    def allocate(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Allocate an operation id."""
        runs.append((ctx.call_id, ctx.kv.get_or_create("op", lambda: "op-second-run")))
        return "done"

    world = World(home)
    world.model.add(script.text("finished"))
    system = world.open(tools=[allocate])  # resumes the owed call
    try:
        assert system.wait_for_idle("a1", timeout_seconds=10)
        assert runs == [(call_id, "op-first-run")]
    finally:
        system.close(timeout_seconds=10)
