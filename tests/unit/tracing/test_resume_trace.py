"""A turn's trace survives a SIGKILL (docs/observability.md, "Traces"): a child process runs
a turn accepted under a ``traceparent`` and is killed inside its durable tool; the next
process resumes the turn, and its spans — the turn, the tool call run again, the request
after it — continue the same trace, under the same parent. Each process exports its spans
(the child to a file, line by line, as each ends; this one in memory)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.tracing import names

from .conftest import named, parent_of

ROOT = Path(__file__).resolve().parents[3]

CHILD = textwrap.dedent(
    """
    import json, os, sys, threading
    from collections.abc import Sequence

    import msgspec
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor, SpanExporter, SpanExportResult,
    )

    import agentkeep as ak
    from agentkeep import tracing
    from agentkeep.providers import script

    home, spans_file, traceparent = sys.argv[1], sys.argv[2], sys.argv[3]

    class FileExporter(SpanExporter):
        '''One JSON line per ended span, durable before the span's end returns.'''

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            with open(spans_file, "a") as out:
                for span in spans:
                    parent = None if span.parent is None else span.parent.span_id
                    line = {
                        "name": span.name,
                        "trace_id": span.context.trace_id,
                        "span_id": span.context.span_id,
                        "parent_id": parent,
                        "attributes": dict(span.attributes or {}),
                    }
                    out.write(json.dumps(line, default=list) + "\\n")
                out.flush()
                os.fsync(out.fileno())
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    tracing.set_tracer_provider(provider)

    class Args(msgspec.Struct):
        text: str

    @ak.tool(durable=True)
    def fetch(ctx: ak.ToolContext, args: Args) -> str:
        '''Tell the parent the call runs, then hang until killed.'''
        print("in-tool", flush=True)
        threading.Event().wait()
        return "never"

    model = ak.ScriptedModel()
    model.add(script.tool_calls(script.call("fetch", {"text": "x"}, call_id="c1")))
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    system = ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", tools=[fetch]
    )
    agent = system.create(id="killed")
    with tracing.remote_parent({"traceparent": traceparent}):
        agent.send(ak.user("go"))
    threading.Event().wait()  # the parent kills this process
    """
)


class Args(msgspec.Struct):
    text: str


def test_the_resumed_turn_continues_the_trace_its_request_started(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    home, spans_file = tmp_path / "state", tmp_path / "child-spans.jsonl"
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    env = {k: v for k, v in os.environ.items() if k != "AGENTKEEP_HOME"}
    # The inherited path stays (on the PostgreSQL pass it opens the child's store there).
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), *inherited])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(home), str(spans_file), f"00-{trace_id}-{parent_id}-01"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # the latch: the tool runs
        assert line == "in-tool\n", child.stderr.read() if child.stderr else ""
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        child.kill()
        child.wait(timeout=30)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()

    before = [json.loads(line) for line in spans_file.read_text().splitlines()]
    (asked,) = [s for s in before if s["name"] == names.inference_name("gym-1")]
    assert asked["trace_id"] == int(trace_id, 16)
    assert not [s for s in before if s["name"] == names.TURN]  # killed before it ended
    child_turn_span = asked["parent_id"]
    loop_id = asked["attributes"][names.LOOP_ID]
    turn_id = asked["attributes"][names.TURN_ID]

    runs: list[str] = []

    @ak.tool(durable=True)
    def fetch(ctx: ak.ToolContext, args: Args) -> str:
        """The same tool in the next process: it runs again (durable)."""
        runs.append(args.text)
        return "fetched"

    model = ak.ScriptedModel()
    model.add(script.text("after the kill"))
    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    system = ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", tools=[fetch]
    )
    try:
        assert system.wait_for_idle("killed", timeout_seconds=10)
    finally:
        system.close(timeout_seconds=10)
    assert runs == ["x"]

    finished = spans.get_finished_spans()
    (turn,) = named(finished, names.TURN)
    assert turn.context.trace_id == int(trace_id, 16)  # the stored trace, after the restart
    assert parent_of(turn) == int(parent_id, 16)
    assert turn.context.span_id != child_turn_span  # a new span of the same turn
    assert turn.attributes is not None
    assert turn.attributes[names.LOOP_ID] == loop_id
    assert turn.attributes[names.TURN_ID] == turn_id
    (call,) = named(finished, names.tool_name("fetch"))
    assert parent_of(call) == turn.context.span_id
    assert call.context.trace_id == int(trace_id, 16)
    assert call.attributes is not None
    assert call.attributes[names.TOOL_RESUMED] is True
    assert call.attributes[names.GEN_AI_TOOL_CALL_ID] == "c1"
    (answer,) = named(finished, names.inference_name("gym-1"))
    assert parent_of(answer) == turn.context.span_id
    assert answer.attributes is not None
    assert answer.attributes[names.TURN_ID] == turn_id
    assert answer.attributes[names.INFERENCE_ID] != asked["attributes"][names.INFERENCE_ID]
