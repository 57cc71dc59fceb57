"""The spans of one turn (docs/observability.md, "Traces"): the turn, its provider requests
and its tool call as the turn's children (the call runs on another thread), the store's group
commits, and the attributes each carries; with no tracer provider, no span and no error."""

from __future__ import annotations

from pathlib import Path

import msgspec
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.tracing import names

from .conftest import named, parent_of


class Args(msgspec.Struct):
    text: str


def open_system(home: Path, model: ak.ScriptedModel) -> ak.AgentSystem:
    @ak.tool
    def echo(ctx: ak.ToolContext, args: Args) -> str:
        """Echo the text back."""
        return f"echo {args.text}"

    providers = ak.Providers()
    providers.add("local", model, kind="gym")
    return ak.AgentSystem.open(
        home, providers=providers, provider="local", model="gym-1", tools=[echo]
    )


def test_a_turn_with_a_tool_call_is_one_span_tree_under_the_caller(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    model = ak.ScriptedModel()
    model.add(
        script.tool_calls(script.call("echo", {"text": "hi"}, call_id="c1")),
        script.text("done", tokens=script.tokens(120, 7)),
    )
    caller_provider = TracerProvider()  # the embedder's own tracer: only its context matters
    system = open_system(tmp_path / "state", model)
    try:
        agent = system.create(id="agent1")
        with caller_provider.get_tracer("test").start_as_current_span("caller") as caller:
            agent.send(ak.user("go"))
        assert agent.wait_for_idle(timeout_seconds=10)
    finally:
        system.close(timeout_seconds=10)
    finished = spans.get_finished_spans()

    (turn,) = named(finished, names.TURN)
    caller_context = caller.get_span_context()
    assert turn.context.trace_id == caller_context.trace_id
    assert parent_of(turn) == caller_context.span_id
    assert turn.attributes is not None
    assert turn.attributes[names.SESSION_ID] == "agent1"
    assert turn.attributes[names.LOOP_ID]
    turn_id = turn.attributes[names.TURN_ID]

    requests = named(finished, names.inference_name("gym-1"))
    assert len(requests) == 2
    for request in requests:
        assert parent_of(request) == turn.context.span_id
        assert request.context.trace_id == caller_context.trace_id
        attributes = request.attributes
        assert attributes is not None
        assert attributes[names.GEN_AI_OPERATION_NAME] == "chat"
        assert attributes[names.GEN_AI_REQUEST_MODEL] == "gym-1"
        assert attributes[names.GEN_AI_PROVIDER_NAME] == "local"
        assert attributes[names.TURN_ID] == turn_id
        assert attributes[names.INFERENCE_ID]
    assert len({r.attributes[names.INFERENCE_ID] for r in requests if r.attributes}) == 2
    last = max(requests, key=lambda span: span.start_time or 0)
    assert last.attributes is not None
    assert last.attributes[names.GEN_AI_USAGE_INPUT_TOKENS] == 120
    assert last.attributes[names.GEN_AI_USAGE_OUTPUT_TOKENS] == 7

    (call,) = named(finished, names.tool_name("echo"))
    assert parent_of(call) == turn.context.span_id
    assert call.attributes is not None
    assert call.attributes[names.GEN_AI_TOOL_NAME] == "echo"
    assert call.attributes[names.GEN_AI_TOOL_CALL_ID] == "c1"
    assert call.attributes[names.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert call.attributes[names.TURN_ID] == turn_id
    first = min(requests, key=lambda span: span.start_time or 0)
    assert first.end_time is not None
    assert call.start_time is not None
    assert first.end_time <= call.start_time  # the request that asked for it came first
    assert call.end_time is not None
    assert turn.end_time is not None
    assert call.end_time <= turn.end_time

    commits = named(finished, names.STORE_COMMIT)
    assert commits, "no group commit span"
    sizes = [c.attributes[names.STORE_GROUP_SIZE] for c in commits if c.attributes]
    assert all(isinstance(size, int) and size >= 1 for size in sizes)


def test_without_a_tracer_provider_nothing_is_recorded_and_the_turn_runs(
    tmp_path: Path,
) -> None:
    exporter = InMemorySpanExporter()  # attached to nothing: OpenTelemetry's default no-op
    model = ak.ScriptedModel()
    model.add(
        script.tool_calls(script.call("echo", {"text": "hi"}, call_id="c1")),
        script.text("done"),
    )
    system = open_system(tmp_path / "state", model)
    try:
        agent = system.create(id="agent1")
        agent.send(ak.user("go"))
        assert agent.wait_for_idle(timeout_seconds=10)
        texts = [m for m in system.transcript("agent1") if isinstance(m, ak.AssistantMessage)]
        assert texts
    finally:
        system.close(timeout_seconds=10)
    assert exporter.get_finished_spans() == ()
    assert ak_tracing_off()


def ak_tracing_off() -> bool:
    from agentkeep.tracing import current_traceparent, tracer

    return tracer() is None and current_traceparent() is None


def test_a_compaction_is_a_span_of_its_turn(tmp_path: Path, spans: InMemorySpanExporter) -> None:
    model = ak.ScriptedModel()
    model.add(script.text("a1"))
    model.add_compactions(script.compacted(ak.user("summary of it all")))
    system = open_system(tmp_path / "state", model)
    try:
        agent = system.create(id="agent1")
        agent.send(ak.user("q1"))
        assert agent.wait_for_idle(timeout_seconds=10)
        agent.compact(wait=True, timeout_seconds=10)
        assert agent.wait_for_idle(timeout_seconds=10)
    finally:
        system.close(timeout_seconds=10)
    finished = spans.get_finished_spans()
    (compaction,) = named(finished, names.COMPACTION)
    assert compaction.attributes is not None
    assert compaction.attributes[names.COMPACTION_ID]
    assert compaction.attributes[names.SESSION_ID] == "agent1"
    assert compaction.status.is_ok
    (turn,) = [t for t in named(finished, names.TURN) if t.context.span_id == parent_of(compaction)]
    assert turn.attributes is not None
    assert turn.attributes[names.TURN_ID]
