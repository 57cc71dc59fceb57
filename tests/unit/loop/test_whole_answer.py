"""A turn's result is its whole answer — with a real process and a real
SIGKILL.

The child's model finishes the answer's text block and then stalls (the stream never ends):
the bound on held blocks commits the block, marking the response open. A SIGKILL then cuts
the response before its end. The next process continues it after "Continue from where you
left off." ("Noted."). The user asked for "The answer is 42.", and the transcript shows it:
the turn's ``result.message`` and the ledger's assistant ``message`` event hold the cut block
and the continuation, not the continuation alone (docs/turns.md, "A turn's result").
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.types import AssistantMessage, SystemMessage, TextDelta, TextEnd, TextStart
from agentkeep.types.records import BlockRecord, SystemRecord

from .conftest import World, python_child, text_of, wait_for_durable_block
from .test_lifecycle_ids import CONTINUE

ANSWER = "The answer is 42."

# The child: one agent whose model finishes the answer's text block, then stalls (blocks
# until cancelled, which nothing does). It prints "asked" once its request is made and waits
# to be killed. ``held_block_seconds`` is the default.
_CHILD = """
import sys, threading
import agentkeep as ak
from agentkeep.types import TextDelta, TextEnd, TextStart
from agentkeep.providers import script

ANSWER = "The answer is 42."

class Tell(ak.Feature):
    name = "tell"
    def before_inference(self, ctx):
        print("asked", flush=True)

model = ak.ScriptedModel()
model.add(script.hang(before=[TextStart(), TextDelta(delta=ANSWER), TextEnd(text=ANSWER)]))
providers = ak.Providers()
providers.add("local", model, kind="gym")
system = ak.AgentSystem.open(sys.argv[1], providers=providers, provider="local",
                             model="gym-1", features=[Tell()])
system.create(id="a1")
system.sessions.send("a1", "What is the answer?", idempotency_key="ask-1")
threading.Event().wait()
"""


def _kill_after_the_answer_block(home: Path) -> None:
    with python_child(_CHILD, home) as child:
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == "asked":
                break
        else:
            raise AssertionError("the child exited before its request")
        wait_for_durable_block(home, "the answer's finished block")
        os.kill(child.pid, signal.SIGKILL)  # a real crash: the response never closes


def test_a_turn_cut_after_its_answer_block_and_continued_has_the_whole_answer(
    tmp_path: Path,
) -> None:
    home = tmp_path / "state"
    _kill_after_the_answer_block(home)

    world = World(home)
    world.model.add(script.text("Noted."))
    system = world.open()  # resumes the agent that owes work
    try:
        assert system.wait_for_idle("a1", timeout_seconds=10)
        # The transcript: the cut answer, the continue notice, the continuation.
        transcript = system.transcript("a1")
        assert [text_of(m) for m in transcript] == [
            "What is the answer?",
            ANSWER,
            CONTINUE,
            "Noted.",
        ]
        assert isinstance(transcript[1], AssistantMessage)
        assert isinstance(transcript[2], SystemMessage)
        # The notice is durably marked as continuing a cut response.
        records = system.internals.store.read(lambda tx: tx.records.load("a1"))
        (notice,) = [r for r in records if isinstance(r, SystemRecord)]
        assert notice.reason == "continue"

        whole = {
            "role": "assistant",
            "parts": [{"type": "text", "text": ANSWER}, {"type": "text", "text": "Noted."}],
        }
        (turn,) = system.sessions.turns("a1")
        assert turn.status == "completed"
        assert turn.result == {"message": whole}
        # The ledger's assistant message: one, the whole answer (the cut response had none).
        events = system.events("a1", limit=1000)
        said = [e.data for e in events if e.type == "message" and e.data["role"] == "assistant"]
        assert said == [{"role": "assistant", "message": whole}]
        completed = [e.data for e in events if e.type == "turn.completed"]
        assert [c["result"] for c in completed] == [{"message": whole}]
    finally:
        system.close(timeout_seconds=10)


def test_a_finished_answer_reopened_by_a_notice_is_not_repeated(tmp_path: Path) -> None:
    """A continue notice before a notice that reopens a finished response is an ordinary
    notice: the reopened response's message is its own, the finished one is not told again."""

    class InjectOnce(ak.Feature):
        name = "inject-once"

        def __init__(self) -> None:
            self.done = False

        def after_agent_loop(self, ctx: ak.HookContext) -> list[ak.InjectAction]:
            if self.done:
                return []
            self.done = True
            return [ak.InjectAction(message=ak.system("a module notice"))]

    world = World(tmp_path / "state")
    world.model.add(script.text("answer"), script.text("more"))
    system = world.open(features=[InjectOnce()])
    try:
        system.create(id="a1")
        sent = system.sessions.send("a1", "question")
        assert system.wait_for_idle("a1", timeout_seconds=10)
        records = system.internals.store.read(lambda tx: tx.records.load("a1"))
        reasons = [r.reason for r in records if isinstance(r, SystemRecord)]
        assert reasons == ["notice", "notice"]
        assert [text_of(m) for m in system.transcript("a1")][-3:] == [
            CONTINUE,
            "a module notice",
            "more",
        ]
        turn = system.sessions.turn("a1", sent.turn.id)
        assert turn.result == {
            "message": {"role": "assistant", "parts": [{"type": "text", "text": "answer"}]}
        }
        events = system.events("a1", limit=1000)
        said = [
            e.data["message"]["parts"]
            for e in events
            if e.type == "message" and e.data["role"] == "assistant"
        ]
        assert said == [[{"type": "text", "text": "answer"}], [{"type": "text", "text": "more"}]]
    finally:
        system.close(timeout_seconds=10)


def test_a_retry_after_a_block_committed_before_the_failure_continues_the_whole_answer(
    tmp_path: Path,
) -> None:
    """A stream that fails after its block was committed on its own (the next block had
    started) is cut too: the retry continues it, and the answer holds both."""
    cut = [TextStart(), TextDelta(delta="part one"), TextEnd(text="part one"), TextStart()]
    world = World(tmp_path / "state")
    world.model.add(script.error("overloaded", before=cut), script.text("part two"))
    system = world.open(retry_forever=True, retry_initial_seconds=0.01, retry_max_seconds=0.02)
    try:
        system.create(id="a1")
        sent = system.sessions.send("a1", "question")
        assert system.wait_for_idle("a1", timeout_seconds=10)
        assert [text_of(m) for m in system.transcript("a1")] == [
            "question",
            "part one",
            CONTINUE,
            "part two",
        ]
        turn = system.sessions.turn("a1", sent.turn.id)
        parts = [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]
        assert turn.result == {"message": {"role": "assistant", "parts": parts}}
    finally:
        system.close(timeout_seconds=10)


def test_the_continued_blocks_are_read_back_across_each_cut_and_stop_at_a_finished_one() -> None:
    """``view.continued_blocks``: a chain of cuts joins whole (the notices of a continuation's
    boundary pass), private blocks are in no message, and a continue notice with reason
    ``notice`` (before a notice that reopened a finished response) joins nothing."""
    from agentkeep.loop.texts import CONTINUE_NOTICE
    from agentkeep.loop.view import continued_blocks
    from agentkeep.types import ReasoningBlock, TextBlock, UserMessage
    from agentkeep.types.records import SystemReason, UserRecord

    def block(text: str, *, private: bool = False) -> BlockRecord:
        return BlockRecord(block=TextBlock(text=text), private=private)

    def continued(reason: SystemReason) -> SystemRecord:
        return SystemRecord(message=CONTINUE_NOTICE, reason=reason)

    notice = SystemRecord(message=SystemMessage(content=(TextBlock(text="a notice"),)))
    user = UserRecord(message_id="m1", message=UserMessage(content=(TextBlock(text="q"),)))
    thought = BlockRecord(block=ReasoningBlock(text="hm", reasoning="sig"))
    finished = [user, block("done"), continued("notice"), notice]
    assert continued_blocks([user]) == ()
    assert continued_blocks(finished) == ()
    cut_twice = [
        *finished,
        thought,
        block("one"),
        block("hidden", private=True),
        continued("continue"),
        notice,
        block("two"),
        continued("continue"),
    ]
    assert continued_blocks(cut_twice) == (
        thought.block,
        TextBlock(text="one"),
        TextBlock(text="two"),
    )
    assert continued_blocks([*cut_twice, notice]) == continued_blocks(cut_twice)
    assert continued_blocks([*cut_twice, user]) == ()
