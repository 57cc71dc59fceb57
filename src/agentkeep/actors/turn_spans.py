"""The spans of one agent's runs: its turns, their provider requests, compactions and tool
calls (docs/observability.md, "Traces").

The agent's actor tells a :class:`TurnSpans` what its loop does (only at a turn's start,
a request, a compaction, a turn's end and the run's stop); everything happens on the
actor's thread but the tool spans, which the tools' threads open as children of the
context :meth:`TurnSpans.parent` handed them: no span relies on a thread's current context.

Invariants:

- The tracer is looked up once per turn: with no provider configured a turn builds nothing,
  and nothing else of it does either (every other method returns at ``self._turn is None``).
- A turn span's parent is the ``traceparent`` stored with the session's live turn (the one
  its REST request carried), read when the turn starts: a run resumed after a restart opens
  its turn under the same trace.
- Every span opened is ended: by its own end, or by the run's stop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from agentkeep.loop.plans import LifecycleIds
from agentkeep.tracing import names, parent_context
from agentkeep.tracing import tracer as configured_tracer
from agentkeep.types import Settings, ToolCallBlock, ToolResultMessage
from agentkeep.types.content import Tokens

#: Reads ``(traceparent, definition_id)`` of the session's live turn.
TraceReader = Callable[[], tuple[str | None, str | None]]


class TurnSpans:
    """The open spans of one agent's run (see the module docstring)."""

    __slots__ = (
        "_agent_id",
        "_base",
        "_compaction",
        "_inferences",
        "_read",
        "_tracer",
        "_turn",
        "_turn_id",
    )

    def __init__(self, agent_id: str, read: TraceReader) -> None:
        self._agent_id = agent_id
        self._read = read
        self._tracer: trace.Tracer | None = None
        self._turn: Span | None = None
        self._turn_id: str | None = None  # the loop's turn the spans belong to
        self._base: dict[str, str] = {}  # the session's attributes, every span carries them
        self._inferences: dict[str, Span] = {}
        self._compaction: Span | None = None

    # -- turns -------------------------------------------------------------------------------
    def turn_started(self, ids: LifecycleIds) -> None:
        """``before_turn``: open the turn's span (ending one left open)."""
        self._end_turn()
        self._turn_id = ids.turn_id
        tracer = self._tracer = configured_tracer()
        if tracer is None:
            return
        try:
            traceparent, definition_id = self._read()
        except Exception:  # a failed read costs the parent, never the turn
            traceparent, definition_id = None, None
        base = {names.SESSION_ID: self._agent_id, names.GEN_AI_CONVERSATION_ID: self._agent_id}
        if definition_id is not None:
            base[names.DEFINITION_ID] = definition_id
            base[names.GEN_AI_AGENT_ID] = definition_id
        self._base = base
        attributes = {**base, **_ids(ids)}
        self._turn = tracer.start_span(
            names.TURN, context=parent_context(traceparent), attributes=attributes
        )

    def turn_ended(self, *, aborted: bool) -> None:
        """``after_turn``: end the turn's span."""
        if self._turn is not None:
            self._turn.set_attribute(names.TURN_ABORTED, aborted)
            self._end_turn()

    def stopped(self, error: str | None) -> None:
        """The run stopped: end whatever is open (its error on each)."""
        for span in (*self._inferences.values(), self._compaction, self._turn):
            if span is not None and error is not None:
                span.set_status(Status(StatusCode.ERROR, error))
        self._end_turn()

    def _end_turn(self) -> None:
        for span in self._inferences.values():
            span.end()
        self._inferences.clear()
        if self._compaction is not None:
            self._compaction.end()
            self._compaction = None
        if self._turn is not None:
            self._turn.end()
            self._turn = None

    def _within(self, ids: LifecycleIds) -> None:
        """Open the span of the turn ``ids`` name if it is not the open one: a run whose
        message was consumed at its acceptance has no ``before_turn`` (docs/architecture.md,
        "Commit boundaries of a step") and starts with its request."""
        if ids.turn_id != self._turn_id:
            self.turn_started(ids)

    def parent(self) -> otel_context.Context | None:
        """The context a child span of the current turn is opened in (None: no turn span)."""
        turn = self._turn
        return None if turn is None else trace.set_span_in_context(turn)

    # -- requests and compactions --------------------------------------------------------------
    def inference_started(self, inference_id: str, settings: Settings, ids: LifecycleIds) -> None:
        """A provider request ``inference_id`` starts."""
        self._within(ids)
        if self._turn is None or self._tracer is None:
            return
        model = settings.model or "default"
        attributes: dict[str, str] = {
            **self._base,
            **_ids(ids),
            names.INFERENCE_ID: inference_id,
            names.GEN_AI_OPERATION_NAME: names.INFERENCE_OPERATION,
            names.GEN_AI_REQUEST_MODEL: model,
        }
        if settings.provider is not None:
            attributes[names.GEN_AI_PROVIDER_NAME] = settings.provider
            attributes[names.GEN_AI_SYSTEM] = settings.provider
        span = self._tracer.start_span(
            names.inference_name(model),
            context=self.parent(),
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
        )
        self._inferences[inference_id] = span

    def inference_context(self, inference_id: str) -> otel_context.Context | None:
        """The context whose span is request ``inference_id``'s (None: not traced), for the
        thread that streams it."""
        span = self._inferences.get(inference_id) if self._inferences else None
        return None if span is None else trace.set_span_in_context(span)

    def inference_finished(
        self, inference_id: str | None, state: str | None, tokens: Tokens | None, error: str | None
    ) -> None:
        """``after_inference``: the request's response ended (how, and what it measured)."""
        if not self._inferences or inference_id is None:
            return
        span = self._inferences.pop(inference_id, None)
        if span is None:
            return
        if state is not None:
            span.set_attribute(names.INFERENCE_STATE, state)
            span.set_attribute(names.GEN_AI_RESPONSE_FINISH_REASONS, (state,))
        if tokens is not None:
            span.set_attribute(names.GEN_AI_USAGE_INPUT_TOKENS, tokens.input)
            span.set_attribute(names.GEN_AI_USAGE_OUTPUT_TOKENS, tokens.output)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    def compaction_started(self, compaction_id: str, settings: Settings, ids: LifecycleIds) -> None:
        """A compaction starts (one at a time)."""
        self._within(ids)
        if self._turn is None or self._tracer is None:
            return
        if self._compaction is not None:
            self._compaction.end()
        attributes = {**self._base, names.COMPACTION_ID: compaction_id}
        if settings.model is not None:
            attributes[names.GEN_AI_REQUEST_MODEL] = settings.model
        self._compaction = self._tracer.start_span(
            names.COMPACTION, context=self.parent(), attributes=attributes
        )

    def compaction_resolved(self, error: str | None) -> None:
        """The compaction ended (``error``: it failed)."""
        span, self._compaction = self._compaction, None
        if span is not None:
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error))
            span.end()

    # -- tool calls -----------------------------------------------------------------------------
    def tool_span_factory(
        self, call: ToolCallBlock, ids: LifecycleIds, *, resumed: bool
    ) -> Callable[[Callable[[], ToolResultMessage]], ToolResultMessage] | None:
        """What runs the call inside its span, on the tool's thread (None: no turn span)."""
        self._within(ids)
        parent = self.parent()
        tracer = self._tracer
        if parent is None or tracer is None:
            return None
        attributes: dict[str, str | bool] = {
            **self._base,
            **_ids(ids),
            names.GEN_AI_OPERATION_NAME: names.TOOL_OPERATION,
            names.GEN_AI_TOOL_NAME: call.name,
            names.GEN_AI_TOOL_CALL_ID: call.call_id,
            names.TOOL_RESUMED: resumed,
        }

        def run(execute: Callable[[], ToolResultMessage]) -> ToolResultMessage:
            with _span(tracer, names.tool_name(call.name), parent, attributes) as span:
                result = execute()
                if result.is_error:
                    span.set_status(Status(StatusCode.ERROR))
                return result

        return run


@contextmanager
def _span(
    tracer: trace.Tracer,
    name: str,
    parent: otel_context.Context,
    attributes: dict[str, str | bool],
) -> Iterator[Span]:
    """A span opened in ``parent`` and current on this thread for the block (so the tool's
    own spans nest under it), ended on exit."""
    span = tracer.start_span(name, context=parent, attributes=attributes)
    with trace.use_span(span, end_on_exit=True, record_exception=True):
        yield span


def _ids(ids: LifecycleIds) -> dict[str, str]:
    found: dict[str, str] = {}
    if ids.loop_id is not None:
        found[names.LOOP_ID] = ids.loop_id
    if ids.turn_id is not None:
        found[names.TURN_ID] = ids.turn_id
    if ids.inference_id is not None:
        found[names.INFERENCE_ID] = ids.inference_id
    if ids.settlement_id is not None:
        found[names.SETTLEMENT_ID] = ids.settlement_id
    return found
