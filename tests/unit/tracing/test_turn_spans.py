"""The spans of one turn (docs/observability.md, "Traces"): the turn, its provider requests
and its tool call as the turn's children (the call runs on another thread), the store's group
commits, and the attributes each carries; with no tracer provider, no span and no error."""

from __future__ import annotations

import threading
from pathlib import Path

import msgspec
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agentkeep as ak
from agentkeep.providers import script
from agentkeep.providers.script import ScriptedResponse
from agentkeep.tracing import current_traceparent, names, remote_parent, tracer
from agentkeep.types import Context

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
    sizes = [c.attributes[names.STORE_GROUP_SIZE] for c in commits if c.attributes]
    assert all(isinstance(size, int) and size >= 1 for size in sizes)
    # The turn's own commits (its consumption, the call's request and result, the answer)
    # are its children when alone in their group, and linked to it when grouped.
    turns = [
        c
        for c in commits
        if parent_of(c) == turn.context.span_id
        or any(link.context.span_id == turn.context.span_id for link in c.links)
    ]
    assert len(turns) >= 2, [(parent_of(c), c.links) for c in commits]
    # The acceptance, committed on the caller's thread, belongs to the caller's trace.
    accepted = [c for c in commits if parent_of(c) == caller_context.span_id]
    linked = [
        c
        for c in commits
        if any(link.context.span_id == caller_context.span_id for link in c.links)
    ]
    assert accepted or linked
    assert all(c.context.trace_id == caller_context.trace_id for c in accepted)


def test_without_a_tracer_provider_nothing_is_built_stored_or_recorded(tmp_path: Path) -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # no SDK set
    assert tracer() is None
    model = ak.ScriptedModel()
    model.add(
        script.tool_calls(script.call("echo", {"text": "hi"}, call_id="c1")),
        script.text("done"),
    )
    system = open_system(tmp_path / "state", model)
    try:
        agent = system.create(id="agent1")
        # A caller's trace context is ignored: tracing is off, nothing is attached or stored.
        with remote_parent({"traceparent": f"00-{'1' * 32}-{'2' * 16}-01"}):
            assert current_traceparent() is None
            agent.send(ak.user("go"))
        assert agent.wait_for_idle(timeout_seconds=10)
        answers = [m for m in system.transcript("agent1") if isinstance(m, ak.AssistantMessage)]
        assert len(answers) == 2  # the call, then the answer: the turn ran
        stored = system.internals.store.read(
            lambda tx: tx.sql.query("SELECT trace_parent FROM turns WHERE agent_id = 'agent1'")
        )
        assert stored == [(None,)]
    finally:
        system.close(timeout_seconds=10)


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


def test_the_request_s_span_is_current_on_the_thread_that_streams_it(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    seen: list[tuple[str, int]] = []

    def answer(context: Context) -> ScriptedResponse:
        # The provider runs on the stream worker, not the agent's thread.
        span = trace.get_current_span().get_span_context()
        seen.append((threading.current_thread().name, span.span_id))
        return script.text("answered")

    model = ak.ScriptedModel()
    model.add(answer)
    system = open_system(tmp_path / "state", model)
    try:
        agent = system.create(id="agent1")
        agent.send(ak.user("go"))
        assert agent.wait_for_idle(timeout_seconds=10)
    finally:
        system.close(timeout_seconds=10)
    (request,) = named(spans.get_finished_spans(), names.inference_name("gym-1"))
    ((thread, current),) = seen
    assert thread.startswith("agentkeep-inference-")
    assert current == request.context.span_id
