"""Lifecycle ids reach a tool call (docs/lifecycle.md): the plain
``before_tool_call`` / ``after_tool_call`` hooks and the tool's own ``ToolContext`` are told
the loop and turn of the run and the inference id of the request whose response asked for
the call."""

from __future__ import annotations

import threading
from typing import Any

import agentkeep as ak
from agentkeep.providers import script

from .conftest import EchoArgs, World
from .test_lifecycle_ids import Recorder

Ids = tuple[str | None, str | None, str | None]


class ToolRecorder(Recorder):
    """Also records the plain tool-call hooks, keyed by the call's text argument."""

    name = "tool-recorder"

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[tuple[str, str], Ids] = {}
        self._lock = threading.Lock()  # the calls of a batch run in their own threads

    def _call(self, hook: str, ctx: ak.HookContext, call: ak.ToolCallInfo) -> None:
        text = call.arguments.text
        with self._lock:
            self.calls[(hook, text)] = (ctx.loop_id, ctx.turn_id, ctx.inference_id)

    def before_tool_call(self, ctx: ak.HookContext, call: ak.ToolCallInfo) -> None:
        self._call("before_tool_call", ctx, call)

    def after_tool_call(self, ctx: ak.HookContext, call: ak.ToolCallInfo, result: Any) -> None:
        self._call("after_tool_call", ctx, call)


def test_a_tool_and_its_hooks_see_the_run_and_the_request_that_asked_for_it(
    world: World,
) -> None:
    tool_seen: dict[str, Ids] = {}
    lock = threading.Lock()

    @ak.tool
    def note(ctx: ak.ToolContext, args: EchoArgs) -> str:
        """Record the ids the call's context carries."""
        with lock:
            tool_seen[args.text] = (ctx.loop_id, ctx.turn_id, ctx.inference_id)
        return args.text

    world.model.add(
        # The first response asks for two calls (one batch), the second for one more.
        script.tool_calls(script.call("note", {"text": "a"}), script.call("note", {"text": "b"})),
        script.tool_call("note", {"text": "c"}),
        script.text("done"),
    )
    recorder = ToolRecorder()
    system = world.open(features=[recorder], tools=[note])
    agent = system.create()
    agent.send(ak.user("go"))
    assert agent.wait_for_idle(timeout_seconds=10)

    ((loop_id, turn_id, _, _),) = recorder.ids("before_turn")
    assert loop_id is not None
    assert turn_id is not None
    assert recorder.ids("after_turn") == [(loop_id, turn_id, None, None)]
    requests = [ids[2] for ids in recorder.ids("before_inference")]
    assert len(requests) == 3
    assert len(set(requests)) == 3
    first, second, _ = requests
    expected = {"a": first, "b": first, "c": second}
    assert tool_seen == {text: (loop_id, turn_id, asked) for text, asked in expected.items()}
    for hook in ("before_tool_call", "after_tool_call"):
        for text, asked in expected.items():
            assert recorder.calls[(hook, text)] == (loop_id, turn_id, asked), (hook, text)
