"""``ScriptedModel``: a local provider that replays scripted responses and records everything.

Each ``stream`` call (on any of its model sessions) replays the next scripted response; each
``compact`` call takes the next scripted compaction. Every model session opened, request
streamed, compaction asked and model session closed is recorded, in order, so a test can assert
exactly what the model was shown. All state is guarded by one lock: model sessions may run on
different threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeAlias

import msgspec

from agentkeep.errors import AgentkeepError
from agentkeep.providers.local_model_session import GuardedStream, ModelSessionRules, RawEvent
from agentkeep.providers.protocol import CancelToken, ModelSession, NamedModels
from agentkeep.providers.responding import LOCAL_MODEL
from agentkeep.providers.script import (
    Hang,
    Raise,
    ScriptedCall,
    ScriptedResponse,
    ScriptStep,
)
from agentkeep.types import (
    DONE_CANCELLED,
    CompactionCancelled,
    CompactionFailed,
    CompactionOutcome,
    Context,
    ModelSessionOptions,
    Selection,
    StreamEvent,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    done_error,
)

ResponseScript: TypeAlias = (
    ScriptedResponse
    | Sequence[ScriptStep]
    | Callable[[Context], "ScriptedResponse | Sequence[ScriptStep]"]
)
"""A scripted response, a plain list of steps, or a function of the request's context."""

CompactionScript: TypeAlias = CompactionOutcome | Hang | Callable[[Context], CompactionOutcome]
"""A compaction outcome, :data:`~agentkeep.providers.script.HANG`, or a function of the context."""


class OpenedModelSession(msgspec.Struct, frozen=True, kw_only=True):
    """A model session the model opened: for which agent, with which options."""

    agent_id: str
    options: ModelSessionOptions


class StreamRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One ``stream`` call: what the model was shown. ``number`` counts from 1 per model."""

    number: int
    agent_id: str
    context: Context
    selection: Selection


class CompactionRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One ``compact`` call. ``number`` counts from 1 per model."""

    number: int
    agent_id: str
    context: Context
    selection: Selection


def render_call(call: ScriptedCall, call_id: str) -> list[StreamEvent]:
    """The ``toolcall_start``/``toolcall_delta``/``toolcall_end`` events of one scripted call."""
    events: list[StreamEvent] = [
        ToolCallStart(call_id=call_id, name=call.name, namespace=call.namespace, server=call.server)
    ]
    text = call.arguments
    if text:
        size = max(1, -(-len(text) // max(1, call.chunks)))
        events += [
            ToolCallDelta(call_id=call_id, delta=text[i : i + size])
            for i in range(0, len(text), size)
        ]
    events.append(ToolCallEnd(call_id=call_id, arguments=text, incomplete=call.incomplete))
    return events


class ScriptedModel(NamedModels):
    """A provider that replays one scripted response per ``stream`` call.

    Args:
        responses: The responses, in the order requests will receive them: each a
            :class:`~agentkeep.providers.script.ScriptedResponse` (see the short-hands in
            :mod:`agentkeep.providers.script`), a list of stream events, or a function of the
            request's :class:`Context` returning either.
        compactions: The outcomes of successive ``compact`` calls.
        models: The model names it serves (any other is refused before acceptance);
            ``gym-1`` unless given.
        record: Keep every request in :attr:`requests` (what tests assert on). False: only
            count them, so a long script (a benchmark, a soak run) keeps no conversation
            alive — each request holds the whole context it was shown, so keeping them all
            grows with the square of the conversation's length.

    A request after the script ran out gets ``done(error)`` saying so; a compaction after the
    compactions ran out fails with ``inference_error``.
    """

    def __init__(
        self,
        responses: Iterable[ResponseScript] = (),
        *,
        compactions: Iterable[CompactionScript] = (),
        models: Iterable[str] = (LOCAL_MODEL,),
        record: bool = True,
    ) -> None:
        super().__init__(models)
        self._record = record
        self._count = 0  # stream requests so far (kept or not)
        self._lock = threading.Condition()
        self._responses: list[ResponseScript] = list(responses)
        self._compactions: list[CompactionScript] = list(compactions)
        self._model_sessions: list[OpenedModelSession] = []
        self._requests: list[StreamRequest] = []
        self._compaction_requests: list[CompactionRequest] = []
        self._closed: list[str] = []

    # -- scripting -------------------------------------------------------------------------

    def add(self, *responses: ResponseScript) -> None:
        """Append responses to the script (for requests not yet made)."""
        with self._lock:
            self._responses.extend(responses)

    def add_compactions(self, *compactions: CompactionScript) -> None:
        """Append compaction outcomes to the script."""
        with self._lock:
            self._compactions.extend(compactions)

    @property
    def remaining(self) -> int:
        """How many scripted responses have not been replayed yet."""
        with self._lock:
            return len(self._responses) - self._count

    # -- records ---------------------------------------------------------------------------

    @property
    def model_sessions(self) -> tuple[OpenedModelSession, ...]:
        """Every model session opened so far, in order: its agent and its options."""
        with self._lock:
            return tuple(self._model_sessions)

    @property
    def requests(self) -> tuple[StreamRequest, ...]:
        """Every ``stream`` request so far, in order: what the model was shown each time.

        Raises:
            AgentkeepError: the model was made with ``record=False`` (it keeps none).
        """
        if not self._record:
            raise AgentkeepError(
                "This ScriptedModel was made with record=False: it counts requests "
                "(wait_for_requests) but keeps none."
            )
        with self._lock:
            return tuple(self._requests)

    @property
    def compactions(self) -> tuple[CompactionRequest, ...]:
        """Every ``compact`` request so far, in order."""
        with self._lock:
            return tuple(self._compaction_requests)

    @property
    def closed_model_sessions(self) -> tuple[str, ...]:
        """The agent ids of closed model sessions, in closing order (an id twice means two
        model sessions of one agent)."""
        with self._lock:
            return tuple(self._closed)

    def wait_for_requests(self, count: int, *, timeout_seconds: float | None = None) -> bool:
        """Block until ``count`` stream requests have been received; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._count >= count, timeout_seconds)

    # -- provider --------------------------------------------------------------------------

    def open_model_session(self, agent_id: str, options: ModelSessionOptions) -> ModelSession:
        """Open a model session replaying the shared script; recorded in :attr:`model_sessions`."""
        with self._lock:
            self._model_sessions.append(OpenedModelSession(agent_id=agent_id, options=options))
        return _ScriptedModelSession(self, agent_id)

    def _next_response(
        self, agent_id: str, context: Context, selection: Selection
    ) -> tuple[int, ResponseScript | None]:
        with self._lock:
            self._count += 1
            number = self._count
            if self._record:
                self._requests.append(
                    StreamRequest(
                        number=number, agent_id=agent_id, context=context, selection=selection
                    )
                )
            self._lock.notify_all()
            script = self._responses[number - 1] if number <= len(self._responses) else None
        return number, script

    def _next_compaction(
        self, agent_id: str, context: Context, selection: Selection
    ) -> tuple[int, CompactionScript | None]:
        with self._lock:
            number = len(self._compaction_requests) + 1
            self._compaction_requests.append(
                CompactionRequest(
                    number=number, agent_id=agent_id, context=context, selection=selection
                )
            )
            self._lock.notify_all()
            scripted = self._compactions[number - 1] if number <= len(self._compactions) else None
        return number, scripted

    def _record_close(self, agent_id: str) -> None:
        with self._lock:
            self._closed.append(agent_id)
            self._lock.notify_all()


def _replay(steps: Sequence[ScriptStep], number: int, cancel: CancelToken) -> Iterator[RawEvent]:
    position = 0
    for step in steps:
        if isinstance(step, ScriptedCall):
            position += 1
            call_id = step.call_id if step.call_id is not None else f"call-{number}-{position}"
            yield from render_call(step, call_id)
        elif isinstance(step, Hang):
            cancel.wait_cancelled()
            yield DONE_CANCELLED
            return
        elif isinstance(step, Raise):
            raise step.exception
        else:
            yield step


class _ScriptedModelSession:
    def __init__(self, model: ScriptedModel, agent_id: str) -> None:
        self._model = model
        self._rules = ModelSessionRules(agent_id)
        self.agent_id = agent_id

    def stream(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> Iterator[StreamEvent]:
        self._rules.begin("stream")
        try:
            number, script = self._model._next_response(self.agent_id, context, selection)
            raw = self._steps(number, script, context, cancel)
        except BaseException:
            self._rules.end()
            raise
        return GuardedStream(raw, cancel, self._rules.end)

    def _steps(
        self, number: int, script: ResponseScript | None, context: Context, cancel: CancelToken
    ) -> Iterator[RawEvent]:
        if script is None:
            message = f"ScriptedModel has no response left for request #{number}."
            return iter([done_error(message)])
        if callable(script):
            script = script(context)
        steps = script.steps if isinstance(script, ScriptedResponse) else tuple(script)
        return _replay(steps, number, cancel)

    def compact(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> CompactionOutcome:
        self._rules.begin("compaction")
        try:
            number, scripted = self._model._next_compaction(self.agent_id, context, selection)
            if cancel.cancelled:
                return CompactionCancelled()
            if scripted is None:
                return CompactionFailed(
                    kind="inference_error",
                    message=f"ScriptedModel has no compaction left for compaction #{number}.",
                )
            if isinstance(scripted, Hang):
                cancel.wait_cancelled()
                return CompactionCancelled()
            if callable(scripted):
                return scripted(context)
            return scripted
        finally:
            self._rules.end()

    def close(self) -> None:
        self._rules.close()
        self._model._record_close(self.agent_id)
