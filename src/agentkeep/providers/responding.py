"""``RespondingModel``: a local provider that answers from the conversation it is handed.

The answer is a pure function of the context, so an agent restarted after a crash
hears exactly what its dead predecessor heard, with the same call ids:

* the last message is a user message ⇒ one tool call ``call-<k>`` where ``k`` counts the
  tool calls already in the context; the tool is ``durable_tool`` when ``k`` is even, else
  ``fragile_tool``; arguments ``{"call": "call-<k>"}``; ``done(tool_call)``;
* otherwise ⇒ the text ``answer-<number of user messages>``; ``done(normal)``;
* tokens ``{input: 10 × messages, output: 5}``.

Optional chaos knobs (latency, failures, longer streams) draw from ``random.Random``s seeded
with ``seed`` and a SHA-256 digest of the encoded context; failures also mix in the agent
and how often this instance was already asked that context there, so a retry can differ. No
hash randomisation, no clock: the same inputs give the same events in every process. Latency
waits on the cancel token, so it never delays a cancel.

Compaction summarises into one ``CompactionMessage`` that carries the counts it replaced
(so answers and call ids continue where they were) and keeps trailing queued input verbatim.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Literal, TypeAlias

import msgspec

from agentkeep.providers.local_model_session import GuardedStream, ModelSessionRules, RawEvent
from agentkeep.providers.protocol import CancelToken, ModelSession, NamedModels
from agentkeep.types import (
    DONE_CANCELLED,
    AgentMessage,
    AssistantMessage,
    CompactionCancelled,
    CompactionCompleted,
    CompactionFailed,
    CompactionMessage,
    CompactionOutcome,
    Context,
    Done,
    Message,
    ModelSessionOptions,
    ProviderErrorInfo,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Selection,
    StreamEvent,
    SystemMessage,
    TextDelta,
    TextEnd,
    TextStart,
    Tokens,
    TokenUsage,
    ToolCallBlock,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    Usage,
    UserMessage,
    done_error,
)

CompactionMode: TypeAlias = Literal["summary", "fail", "cancel", "hang"]
Range: TypeAlias = float | tuple[float, float]

SUMMARY_VENDOR_KEY = "agentkeep.responding"
LOCAL_MODEL = "gym-1"  # the name the local test models serve unless given others


class _SummaryCounts(msgspec.Struct, frozen=True):
    user_messages: int
    tool_calls: int


class _SummaryVendor(msgspec.Struct, frozen=True, rename={"counts": SUMMARY_VENDOR_KEY}):
    counts: _SummaryCounts


_summary_decoder = msgspec.json.Decoder(_SummaryVendor)


def _summarised_counts(message: CompactionMessage) -> _SummaryCounts | None:
    if message.vendor is None:
        return None
    try:
        return _summary_decoder.decode(message.vendor).counts
    except msgspec.DecodeError:
        return None


def count_conversation(messages: tuple[Message, ...]) -> tuple[int, int]:
    """``(user messages, tool calls)`` in ``messages``, including those a summary replaced."""
    users = 0
    calls = 0
    for message in messages:
        if isinstance(message, UserMessage):
            users += 1
        elif isinstance(message, AssistantMessage):
            calls += sum(isinstance(block, ToolCallBlock) for block in message.content)
        elif isinstance(message, CompactionMessage):
            counts = _summarised_counts(message)
            if counts is not None:
                users += counts.user_messages
                calls += counts.tool_calls
    return users, calls


def _seeded(material: str) -> random.Random:
    # sha256, not hash(): str hashing is randomised per process (PYTHONHASHSEED).
    return random.Random(int.from_bytes(hashlib.sha256(material.encode()).digest(), "big"))


def _chunks(text: str, count: int) -> list[str]:
    if count <= 1 or len(text) <= 1:
        return [text]
    size = -(-len(text) // min(count, len(text)))
    return [text[i : i + size] for i in range(0, len(text), size)]


class RespondingModel(NamedModels):
    """A deterministic provider that answers from the conversation.

    Args:
        models: The model names it serves (any other is refused before acceptance);
            ``gym-1`` unless given.
        seed: Seeds every chaos draw (mixed with the conversation's digest).
        durable_tool: The tool called on even call numbers.
        fragile_tool: The tool called on odd call numbers.
        latency_seconds: Delay before each event: a number, or a ``(low, high)`` range drawn
            per event. Waited on the cancel token, so cancellation is never delayed.
        failure_rate: Probability that a response fails (``done(error)`` with a
            ``server_overloaded`` provider error) at a seeded event index.
        stream_chunks: How many deltas the text/arguments are split into: a number, or a
            ``(low, high)`` range drawn per response (so campaigns can abort at many indexes).
        reasoning: Prefix every response with a signed reasoning block.
        usage_events: Emit a ``token_usage`` event before ``done``.
        compaction: ``"summary"`` (default), ``"fail"``, ``"cancel"``, ``"hang"`` (until
            cancelled), a fixed outcome, or a function of the context.
        past_notices: Read past trailing system messages when deciding whether the user
            spoke last (so a user message behind a hook's boundary notices still gets its
            tool call).
    """

    def __init__(
        self,
        *,
        models: Iterable[str] = (LOCAL_MODEL,),
        seed: int = 0,
        durable_tool: str = "durable_tool",
        fragile_tool: str = "fragile_tool",
        latency_seconds: Range = 0.0,
        failure_rate: float = 0.0,
        stream_chunks: int | tuple[int, int] = 1,
        reasoning: bool = False,
        usage_events: bool = True,
        compaction: CompactionMode
        | CompactionOutcome
        | Callable[[Context], CompactionOutcome] = "summary",
        past_notices: bool = False,
    ) -> None:
        if not 0.0 <= failure_rate <= 1.0:
            raise ValueError("failure_rate must be within [0, 1].")
        super().__init__(models)
        self.seed = seed
        self.durable_tool = durable_tool
        self.fragile_tool = fragile_tool
        self.latency_seconds = latency_seconds
        self.failure_rate = failure_rate
        self.stream_chunks = stream_chunks
        self.reasoning = reasoning
        self.usage_events = usage_events
        self.compaction = compaction
        self.past_notices = past_notices
        self._lock = threading.Lock()
        self._asked: dict[str, int] = {}
        self._requests = 0
        self._prefills: list[int] = []

    @property
    def prefills(self) -> tuple[int, ...]:
        """The numbers (from 1) of the requests whose input ended with the model's own message
        (an assistant prefill, which providers such as Claude reject): a runtime must never
        send one. Chaos campaigns report each as a violation."""
        with self._lock:
            return tuple(self._prefills)

    @property
    def request_count(self) -> int:
        """How many ``stream`` calls this model served (all model sessions)."""
        with self._lock:
            return self._requests

    def open_model_session(self, agent_id: str, options: ModelSessionOptions) -> ModelSession:
        """Open a model session answering from the conversation it is shown (see
        :meth:`Provider.open_model_session
        <agentkeep.providers.protocol.Provider.open_model_session>`).
        """
        return _RespondingModelSession(self, agent_id)

    # -- the answer ------------------------------------------------------------------------

    def _rngs(
        self, agent_id: str, context: Context, purpose: str
    ) -> tuple[random.Random, random.Random]:
        """Two seeded generators: one for the shape of the answer, one for failures.

        The shape (chunking, latency) depends only on the seed and the conversation, so the
        same conversation always streams the same events. The failure draw also mixes in the
        agent and how often this instance was asked this conversation in it, so a retry
        can succeed where the first attempt failed, identically in every process.
        """
        digest = hashlib.sha256(msgspec.json.encode(context.messages)).hexdigest()
        with self._lock:
            key = f"{purpose}:{agent_id}:{digest}"
            attempt = self._asked.get(key, 0)
            self._asked[key] = attempt + 1
            if purpose == "stream":
                self._requests += 1
                messages = context.messages
                if messages and isinstance(messages[-1], AssistantMessage):
                    self._prefills.append(self._requests)
        shape = f"{self.seed}:{purpose}:{digest}"
        failure = f"{self.seed}:{purpose}:failure:{agent_id}:{digest}:{attempt}"
        return _seeded(shape), _seeded(failure)

    def response(self, context: Context, rng: random.Random) -> list[StreamEvent]:
        """The full event list for ``context`` (before latency, failures and cancellation)."""
        messages = context.messages
        users, calls = count_conversation(messages)
        chunks = self._draw_chunks(rng)
        done_tokens = Tokens(input=10 * len(messages), output=5)
        events: list[StreamEvent] = []
        if self.reasoning:
            thought = f"thinking about {len(messages)} messages"
            events.append(ReasoningStart())
            events += [ReasoningDelta(delta=part) for part in _chunks(thought, chunks)]
            events.append(ReasoningEnd(text=thought, reasoning=f"sig-{users}-{calls}"))
        terminal: Done
        spoken = messages
        if self.past_notices:
            while spoken and isinstance(spoken[-1], SystemMessage):
                spoken = spoken[:-1]
        if spoken and isinstance(spoken[-1], UserMessage):
            call_id = f"call-{calls}"
            name = self.durable_tool if calls % 2 == 0 else self.fragile_tool
            arguments = msgspec.json.encode({"call": call_id}).decode()
            events.append(ToolCallStart(call_id=call_id, name=name))
            events += [
                ToolCallDelta(call_id=call_id, delta=part) for part in _chunks(arguments, chunks)
            ]
            events.append(ToolCallEnd(call_id=call_id, arguments=arguments))
            terminal = Done(state="tool_call", tokens=done_tokens)
        else:
            answer = f"answer-{users}"
            events.append(TextStart())
            events += [TextDelta(delta=part) for part in _chunks(answer, chunks)]
            events.append(TextEnd(text=answer))
            terminal = Done(state="normal", tokens=done_tokens)
        if self.usage_events:
            events.append(TokenUsage(usage=Usage(input=done_tokens.input, output=5)))
        events.append(terminal)
        return events

    def _draw_chunks(self, rng: random.Random) -> int:
        if isinstance(self.stream_chunks, tuple):
            low, high = self.stream_chunks
            return rng.randint(low, high)
        return self.stream_chunks

    def _draw_latency(self, rng: random.Random) -> float:
        if isinstance(self.latency_seconds, tuple):
            low, high = self.latency_seconds
            return rng.uniform(low, high)
        return self.latency_seconds

    def _events(self, agent_id: str, context: Context, cancel: CancelToken) -> Iterator[RawEvent]:
        # Drawn eagerly, when the request is made, so the attempt count does not depend on
        # whether (or when) the caller starts iterating.
        rng, failures = self._rngs(agent_id, context, "stream")
        events = self.response(context, rng)
        fail_at = len(events)
        if self.failure_rate > 0 and failures.random() < self.failure_rate:
            fail_at = failures.randrange(len(events))  # any index: 0 means no output at all
        return self._play(events, fail_at, rng, cancel)

    def _play(
        self, events: list[StreamEvent], fail_at: int, rng: random.Random, cancel: CancelToken
    ) -> Iterator[RawEvent]:
        for index, event in enumerate(events):
            delay = self._draw_latency(rng)
            if delay > 0 and cancel.wait_cancelled(delay):
                yield DONE_CANCELLED
                return
            if index == fail_at:
                yield done_error(
                    "RespondingModel: seeded failure.",
                    provider_error=ProviderErrorInfo(
                        type="server_overloaded", diagnostics={"event_index": index}
                    ),
                )
                return
            yield event

    # -- compaction ------------------------------------------------------------------------

    def summarise(self, context: Context) -> CompactionCompleted:
        """The default compaction: one summary message, then the trailing queued input."""
        messages = context.messages
        keep_from = len(messages)
        while keep_from > 0 and isinstance(
            messages[keep_from - 1], UserMessage | SystemMessage | AgentMessage
        ):
            keep_from -= 1
        replaced, kept = messages[:keep_from], messages[keep_from:]
        users, calls = count_conversation(replaced)
        summary = (
            f"Summary of {len(replaced)} messages ({users} user messages, {calls} tool calls)."
        )
        vendor = msgspec.json.encode(_SummaryVendor(_SummaryCounts(users, calls))).decode()
        replacement = (CompactionMessage(content=summary, vendor=vendor), *kept)
        return CompactionCompleted(
            messages=replacement,
            summary=summary,
            usage=Usage(input=10 * len(messages), output=5),
        )

    def _compact(self, agent_id: str, context: Context, cancel: CancelToken) -> CompactionOutcome:
        rng, _ = self._rngs(agent_id, context, "compact")
        delay = self._draw_latency(rng)
        if cancel.cancelled or (delay > 0 and cancel.wait_cancelled(delay)):
            return CompactionCancelled()
        mode = self.compaction
        if mode == "summary":
            return self.summarise(context)
        if mode == "fail":
            return CompactionFailed(
                kind="inference_error", message="RespondingModel: compaction configured to fail."
            )
        if mode == "cancel":
            return CompactionCancelled()
        if mode == "hang":
            cancel.wait_cancelled()
            return CompactionCancelled()
        if callable(mode):
            return mode(context)
        return mode


class _RespondingModelSession:
    def __init__(self, model: RespondingModel, agent_id: str) -> None:
        self._model = model
        self._rules = ModelSessionRules(agent_id)
        self.agent_id = agent_id

    def stream(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> Iterator[StreamEvent]:
        self._rules.begin("stream")
        return GuardedStream(
            self._model._events(self.agent_id, context, cancel), cancel, self._rules.end
        )

    def compact(
        self, context: Context, selection: Selection, cancel: CancelToken
    ) -> CompactionOutcome:
        self._rules.begin("compaction")
        try:
            return self._model._compact(self.agent_id, context, cancel)
        finally:
            self._rules.end()

    def close(self) -> None:
        self._rules.close()
