"""A finished block is durable within a bound, even when the stream stalls after it
— with a real process and a real SIGKILL.

The child's model finishes a reasoning block and then thinks forever (the stream blocks until
cancelled: no event follows the block). Before the bound existed the loop held that block for
the next event, so it stayed volatile for as long as the model thought: a SIGKILL lost it and
the request was asked afresh under the same inference id. Now the block is committed within
``held_block_seconds``: the test waits until a read-only reader sees it (a bounded deadline,
far above the bound), kills the child, and a new process continues the response after
"Continue from where you left off." under a new inference id (docs/lifecycle.md).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from agentkeep.providers import script
from agentkeep.types import AssistantMessage, ReasoningBlock, SystemMessage, TextBlock, UserMessage
from agentkeep.types.ledger import ASSISTANT_BLOCK
from agentkeep.types.records import BlockRecord

from .conftest import World, printed, python_child, wait_for_durable_block
from .test_lifecycle_ids import CONTINUE, Recorder, assert_never_ends_with_own_message

BLOCK = ReasoningBlock(text="thinking it over", reasoning="sig")

# The child: one agent whose model finishes a reasoning block, then stalls (blocks until
# cancelled, which nothing does). It prints the ids ``before_inference`` was told and waits
# to be killed. ``held_block_seconds`` is the default.
_CHILD = """
import json, sys, threading
import agentkeep as ak
from agentkeep.types import ReasoningDelta, ReasoningEnd, ReasoningStart
from agentkeep.providers import script

class Tell(ak.Feature):
    name = "tell"
    def before_inference(self, ctx):
        ids = [ctx.loop_id, ctx.turn_id, ctx.inference_id]
        print(json.dumps(["before_inference", *ids]), flush=True)

model = ak.ScriptedModel()
model.add(script.hang(before=[
    ReasoningStart(),
    ReasoningDelta(delta="thinking it over"),
    ReasoningEnd(text="thinking it over", reasoning="sig"),
]))
providers = ak.Providers()
providers.add("local", model, kind="gym")
system = ak.AgentSystem.open(sys.argv[1], providers=providers, provider="local",
                             model="gym-1", features=[Tell()])
system.create(id="a1").send(ak.user("question"))
threading.Event().wait()
"""


def test_a_block_the_stream_stalls_after_survives_a_sigkill_and_is_continued(
    tmp_path: Path,
) -> None:
    home = tmp_path / "state"
    with python_child(_CHILD, home) as child:
        told = next(printed(child), None)
        assert told is not None, "the child exited before its request"
        hook, loop_id, turn_id, cut_id = told
        assert hook == "before_inference"
        # The model stalls after the block; the bound commits it anyway.
        records, owed, events = wait_for_durable_block(
            home, "the stalled response's finished block"
        )
        os.kill(child.pid, signal.SIGKILL)  # a real crash: nothing after this runs

    # What the dead process left: the block, in the history and the ledger, and the owed
    # fact marking the request's response open under the request's id.
    assert [r.block for r in records if isinstance(r, BlockRecord)] == [BLOCK]
    assert ASSISTANT_BLOCK in events
    assert owed is not None
    assert owed.response_open
    assert (owed.loop_id, owed.turn_id, owed.inference_id) == (loop_id, turn_id, cut_id)

    world = World(home)
    world.model.add(script.text("the answer"))
    after = Recorder()
    system = world.open(features=[after])  # resumes the agent that owes work
    try:
        assert system.wait_for_idle("a1", timeout_seconds=10)
        # The response was continued after the notice, never asked afresh.
        (request,) = world.model.requests
        assert_never_ends_with_own_message(world.model.requests)
        messages = request.context.messages
        assert [type(m) for m in messages] == [UserMessage, AssistantMessage, SystemMessage]
        assert messages[1].content == (BLOCK,)  # type: ignore[union-attr]
        assert messages[2].content == (TextBlock(text=CONTINUE),)  # type: ignore[union-attr]
        history = system.transcript("a1")
        assert [type(m) for m in history] == [
            UserMessage,
            AssistantMessage,
            SystemMessage,
            AssistantMessage,
        ]
        assert history[3].content == (TextBlock(text="the answer"),)  # type: ignore[union-attr]
        # Under a new inference id; the same loop and turn.
        assert after.ids("before_turn") == [(loop_id, turn_id, None, None)]
        ((_, _, resumed_id, _),) = after.ids("before_inference")
        assert resumed_id not in (None, cut_id)
        assert system.internals.store.read(lambda tx: tx.facts.read_owed("a1")) is None
    finally:
        system.close(timeout_seconds=10)
