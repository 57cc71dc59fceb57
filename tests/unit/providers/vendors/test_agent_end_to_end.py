"""End to end: an agent on each vendor adapter, against the local wire-format server,
answers a turn with a parallel tool batch, is killed inside that batch, is resumed, and the
request it replays after the resume is byte-stable for the kept prefix.

Each test runs the same conversation twice on fresh state directories:

* a **reference** process that is never killed: the model (the local server) answers the
  question with two parallel calls — ``lookup`` (durable) and ``notify`` (not durable) — then,
  given their results, with a final text;
* a **killed** process: the same conversation, with the store's fault plan set so that the
  first store operation after both calls of the (durable) batch started fails, and every later
  one too (the process "died" there: nothing it does afterwards lands). Both calls had run;
  neither result was committed. A fresh system on the same directory then resumes the owed
  batch: the durable tool runs again, the non-durable one is answered "interrupted by a
  restart" without running.

The crash point is not a guessed number: the reference run counts the store operations at the
moment both tools are running (both blocked on a gate, so the count is at rest), and the
killed run fails the next one — the ``BEGIN`` of the first result's commit. The killed run
checks it reached the same count before it lets the tools finish.

**What "byte-stable" asserts** (see :func:`assert_byte_stable`). Every request body is split,
on its raw bytes, into: the bytes before the conversation array's first element (model,
limits, system, ...), the array's elements, and the bytes from the array's closing ``]`` to
the end (tools, settings, ...). The key order and spacing are the SDK's own; nothing is
re-serialised. With ``k`` the number of conversation elements up to and including the
assistant's tool-call turn (instructions, the question, reasoning, the calls):

1. the killed process's one request is byte-identical to the reference's first request;
2. the resumed request's bytes ``raw[:end of element k]`` — everything before the array plus
   the kept conversation prefix, signed/encrypted reasoning included — equal the reference
   second request's, byte for byte; and its bytes from the closing ``]`` to the end equal the
   reference's too. Only the tool results may differ, and they are checked exactly: the
   durable result is the same text, the non-durable one is the interrupted error;
3. the kept elements that were already in the pre-crash request are the same bytes there,
   except for Anthropic, whose adapter moves its single message cache marker to the newest
   block on every request (the documented prompt-caching pattern): there the question turn
   differs by exactly that marker, which is asserted on the parsed JSON.

A second test does the same with a real process death: a child process runs the agent with the
fault plan in ``kill`` mode (it sends itself ``SIGKILL`` at that store operation), and this
process resumes the directory the child left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest

import agentkeep as ak
from agentkeep.chaos import FaultInjection, FaultPlan
from agentkeep.providers import (
    AnthropicProvider,
    OpenAICompatibleProvider,
    OpenAIProvider,
    ProviderKind,
)
from agentkeep.providers.retry import RetryPolicy
from agentkeep.types import (
    AssistantMessage,
    Message,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)

AGENT = "agent1"
QUESTION = "What is the weather in Oslo? Tell the team."
INSTRUCTIONS = "Be brief."
INTERRUPTED = "The tool call was interrupted by a restart and was not retried."
LOOKUP_RESULT = "12°C in Oslo"  # non-ASCII on purpose: the bytes must survive the store
NOTIFY_RESULT = "sent: on my way"
FINAL = "It is 12°C in Oslo; the team knows."
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+/Z0n3B4f/8a=="
ENCRYPTED = "gAAAAABoX1-encrypted+/reasoning==payload"
WAIT_SECONDS = 30.0


# -- the tools ----------------------------------------------------------------------------------


class City(msgspec.Struct):
    city: str = ""


class Note(msgspec.Struct):
    text: str = ""


@dataclass
class Bench:
    """Where the tools report their runs; while ``gated``, each waits for :meth:`release`.

    ``lookup_after_notify`` makes ``lookup`` return only once ``notify`` has run (results are
    committed in call order, so no result is committed before both calls ran).
    """

    gated: bool = False
    lookup_after_notify: bool = False
    runs: Counter[str] = field(default_factory=Counter)
    entered: dict[str, threading.Event] = field(
        default_factory=lambda: {"lookup": threading.Event(), "notify": threading.Event()}
    )
    released: threading.Event = field(default_factory=threading.Event)
    ledger: Path | None = None  # a child process also appends its runs here

    def ran(self, name: str) -> None:
        self.runs[name] += 1
        if self.ledger is not None:
            with self.ledger.open("a") as out:  # the kernel keeps it through a SIGKILL
                out.write(f"{name}\n")
        self.entered[name].set()
        if self.gated:
            assert self.released.wait(WAIT_SECONDS), "the test never released the tools"
        if self.lookup_after_notify and name == "lookup":
            assert self.entered["notify"].wait(WAIT_SECONDS), "notify never started"

    def wait_both_running(self) -> None:
        for name, event in self.entered.items():
            assert event.wait(WAIT_SECONDS), f"{name} never started"

    def release(self) -> None:
        self.released.set()


def make_tools(bench: Bench) -> list[ak.Tool[Any, Any]]:
    """Fresh tools per process, reporting to ``bench``; same names and schemas every time."""

    @ak.tool(durable=True)
    def lookup(ctx: ak.ToolContext, args: City) -> str:
        """The current weather of a city (read-only: safe to run again)."""
        bench.ran("lookup")
        return f"12°C in {args.city}"

    @ak.tool
    def notify(ctx: ak.ToolContext, args: Note) -> str:
        """Tell the team something (a side effect: at most once)."""
        bench.ran("notify")
        return f"sent: {args.text}"

    return [lookup, notify]


# -- the vendors' answers ----------------------------------------------------------------------


def _anthropic_start() -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "claude-test",
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 40,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 1,
            },
        },
    }


def _anthropic_end(stop_reason: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 20},
        },
        {"type": "message_stop"},
    ]


def anthropic_tool_reply(server: Any) -> Any:
    """Signed thinking, then two tool_use blocks whose JSON arguments stream interleaved."""

    def delta(index: int, **body: str) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": body}

    def start(index: int, block: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_start", "index": index, "content_block": block}

    events = [
        _anthropic_start(),
        start(0, {"type": "thinking", "thinking": ""}),
        delta(0, type="thinking_delta", thinking="Look up, "),
        delta(0, type="thinking_delta", thinking="then notify."),
        delta(0, type="signature_delta", signature=SIGNATURE),
        {"type": "content_block_stop", "index": 0},
        start(1, {"type": "tool_use", "id": "toolu_A", "name": "lookup", "input": {}}),
        start(2, {"type": "tool_use", "id": "toolu_B", "name": "notify", "input": {}}),
        delta(1, type="input_json_delta", partial_json='{"city": '),
        delta(2, type="input_json_delta", partial_json='{"text": "on my way"}'),
        delta(1, type="input_json_delta", partial_json='"Oslo"}'),
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_stop", "index": 2},
        *_anthropic_end("tool_use"),
    ]
    return server.Reply(frames=server.typed_sse(*events))


def anthropic_text_reply(server: Any) -> Any:
    events = [
        _anthropic_start(),
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": FINAL}},
        {"type": "content_block_stop", "index": 0},
        *_anthropic_end("end_turn"),
    ]
    return server.Reply(frames=server.typed_sse(*events))


class ResponsesScript:
    """A Responses API event stream with running sequence numbers."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []
        self.add("response.created", response=self.response("in_progress"))

    def add(self, event_type: str, **fields: object) -> ResponsesScript:
        self.events.append({"type": event_type, "sequence_number": len(self.events), **fields})
        return self

    def response(self, status: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        return {
            "id": "resp_1",
            "object": "response",
            "created_at": 1760000000,
            "status": status,
            "model": "gpt-test",
            "output": list(self.output),
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "usage": usage,
        }

    def reasoning(self, index: int, summary: str) -> ResponsesScript:
        item_id = f"rs_{index}"
        added = {"id": item_id, "type": "reasoning", "summary": []}
        self.add("response.output_item.added", output_index=index, item=added)
        where = {"item_id": item_id, "output_index": index, "summary_index": 0}
        part = {"type": "summary_text", "text": ""}
        self.add("response.reasoning_summary_part.added", **where, part=part)
        self.add("response.reasoning_summary_text.delta", **where, delta=summary)
        done = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": summary}],
            "encrypted_content": ENCRYPTED,
        }
        self.output.append(done)
        return self.add("response.output_item.done", output_index=index, item=done)

    def call(self, index: int, call_id: str, name: str, *chunks: str) -> ResponsesScript:
        item = {
            "id": f"fc_{index}",
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": call_id,
            "name": name,
        }
        self.add("response.output_item.added", output_index=index, item=item)
        for chunk in chunks:
            self.add(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=index,
                delta=chunk,
            )
        arguments = "".join(chunks)
        self.add(
            "response.function_call_arguments.done",
            item_id=item["id"],
            output_index=index,
            arguments=arguments,
        )
        done = {**item, "status": "completed", "arguments": arguments}
        self.output.append(done)
        return self.add("response.output_item.done", output_index=index, item=done)

    def message(self, index: int, text: str) -> ResponsesScript:
        item_id = f"msg_{index}"
        added = {
            "id": item_id,
            "type": "message",
            "status": "in_progress",
            "role": "assistant",
            "content": [],
        }
        self.add("response.output_item.added", output_index=index, item=added)
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        part = {"type": "output_text", "text": "", "annotations": []}
        self.add("response.content_part.added", **where, part=part)
        self.add("response.output_text.delta", **where, delta=text, logprobs=[])
        self.add("response.output_text.done", **where, text=text, logprobs=[])
        done = {
            **added,
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
            "phase": "final_answer",
        }
        self.output.append(done)
        return self.add("response.output_item.done", output_index=index, item=done)

    def frames(self, server: Any) -> list[bytes]:
        usage = {
            "input_tokens": 40,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 5},
            "total_tokens": 60,
        }
        self.add("response.completed", response=self.response("completed", usage))
        return list(server.typed_sse(*self.events))


def responses_tool_reply(server: Any) -> Any:
    script = (
        ResponsesScript()
        .reasoning(0, "Look up, then notify.")
        .call(1, "call_A", "lookup", '{"city":', '"Oslo"}')
        .call(2, "call_B", "notify", '{"text":"on my way"}')
    )
    return server.Reply(frames=script.frames(server))


def responses_text_reply(server: Any) -> Any:
    return server.Reply(frames=ResponsesScript().message(0, FINAL).frames(server))


def _chat_chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    )
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1760000000,
        "model": "qwen3-8b",
        "system_fingerprint": None,
        "choices": choices,
        "usage": usage,
    }


def _chat_frames(server: Any, *deltas: dict[str, Any], finish: str) -> list[bytes]:
    usage = {"prompt_tokens": 40, "completion_tokens": 20, "total_tokens": 60}
    chunks = [
        *(_chat_chunk(delta) for delta in deltas),
        _chat_chunk({}, finish=finish),
        _chat_chunk(None, usage=usage),
    ]
    return [*(server.sse(None, chunk) for chunk in chunks), server.sse(None, "[DONE]")]


def chat_tool_reply(server: Any) -> Any:
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, **fields}]}

    frames = _chat_frames(
        server,
        {"role": "assistant", "content": "Checking."},
        call(0, id="call_A", type="function", function={"name": "lookup", "arguments": ""}),
        call(0, function={"arguments": '{"city":'}),
        call(1, id="call_B", type="function", function={"name": "notify", "arguments": ""}),
        call(1, function={"arguments": '{"text":"on my way"}'}),
        call(0, function={"arguments": '"Oslo"}'}),
        finish="tool_calls",
    )
    return server.Reply(frames=frames)


def chat_text_reply(server: Any) -> Any:
    frames = _chat_frames(
        server, {"role": "assistant", "content": ""}, {"content": FINAL}, finish="stop"
    )
    return server.Reply(frames=frames)


# -- the adapters under test -------------------------------------------------------------------

Json = dict[str, Any]
VendorProvider = AnthropicProvider | OpenAIProvider | OpenAICompatibleProvider


def _anthropic_answers(items: list[Json]) -> list[tuple[str, str]]:
    (turn,) = items  # all results of one batch share one user turn
    assert turn["role"] == "user"
    return [(b["tool_use_id"], b["content"][0]["text"]) for b in turn["content"]]


def _responses_answers(items: list[Json]) -> list[tuple[str, str]]:
    assert {item["type"] for item in items} == {"function_call_output"}
    return [(item["call_id"], item["output"]) for item in items]


def _chat_answers(items: list[Json]) -> list[tuple[str, str]]:
    assert {item["role"] for item in items} == {"tool"}
    return [(item["tool_call_id"], item["content"]) for item in items]


@dataclass(frozen=True)
class Adapter:
    """One vendor adapter: how to build it, what its server answers, and its request shape.

    ``kept`` counts the conversation elements up to and including the assistant's tool-call
    turn (instructions sent as a message count); ``answers`` reads the tool results that
    follow as (call id, text) in order.
    """

    name: str
    kind: ProviderKind
    model: str
    make: Callable[[str], VendorProvider]
    tool_reply: Callable[[Any], Any]
    text_reply: Callable[[Any], Any]
    path: str
    array: str
    kept: int
    call_ids: tuple[str, str]
    answers: Callable[[list[Json]], list[tuple[str, str]]]
    moves_cache_marker: bool = False


NO_RETRIES = RetryPolicy(max_retries=0)  # any failure ends the turn: nothing hides a bug

ADAPTERS = [
    Adapter(
        name="anthropic",
        kind="claude",
        model="anthropic/claude-test",
        make=lambda url: AnthropicProvider(
            api_key="sk-ant-test-not-a-real-key",
            base_url=url,
            model="claude-test",
            max_tokens=1000,
            retry=NO_RETRIES,
        ),
        tool_reply=anthropic_tool_reply,
        text_reply=anthropic_text_reply,
        path="/v1/messages",
        array="messages",
        kept=2,  # the question, the assistant turn (signed thinking + both tool_use)
        call_ids=("toolu_A", "toolu_B"),
        answers=_anthropic_answers,
        moves_cache_marker=True,
    ),
    Adapter(
        name="openai-responses",
        kind="codex",
        model="openai/gpt-test",
        make=lambda url: OpenAIProvider(
            api_key="sk-openai-test-not-a-real-key",
            base_url=f"{url}/v1",
            model="gpt-test",
            retry=NO_RETRIES,
        ),
        tool_reply=responses_tool_reply,
        text_reply=responses_text_reply,
        path="/v1/responses",
        array="input",
        kept=4,  # the question, the reasoning item, both function_call items
        call_ids=("call_A", "call_B"),
        answers=_responses_answers,
    ),
    Adapter(
        name="openai-chat",
        kind="codex",
        model="openai/qwen3-8b",
        make=lambda url: OpenAICompatibleProvider(
            base_url=f"{url}/v1",
            model="qwen3-8b",
            api_key="sk-local-test-not-a-real-key",
            retry=NO_RETRIES,
        ),
        tool_reply=chat_tool_reply,
        text_reply=chat_text_reply,
        path="/v1/chat/completions",
        array="messages",
        kept=3,  # the system message, the question, the assistant turn with both calls
        call_ids=("call_A", "call_B"),
        answers=_chat_answers,
    ),
]
BY_NAME = {adapter.name: adapter for adapter in ADAPTERS}


@contextmanager
def agent_process(
    adapter: Adapter,
    url: str,
    home: Path,
    bench: Bench,
    *,
    faults: FaultPlan | None = None,
    resume: bool = True,
) -> Iterator[ak.AgentSystem]:
    """One "process": a fresh provider and system on ``home``, closed on the way out."""
    provider = adapter.make(url)
    providers = ak.Providers()
    providers.add(adapter.kind, provider, kind=adapter.kind)
    try:
        system = ak.AgentSystem.open(
            home,
            providers=providers,
            provider=adapter.kind,
            model=adapter.model,
            tools=make_tools(bench),
            instructions=INSTRUCTIONS,
            testing=FaultInjection(faults=faults),
            resume=resume,
        )
        try:
            yield system
        finally:
            system.close(timeout_seconds=WAIT_SECONDS)
    finally:
        provider.close()


# -- reading request bodies byte for byte ------------------------------------------------------

_SPACE = re.compile(r"[ \t\n\r]*")


@dataclass(frozen=True)
class Body:
    """A request body cut on its raw bytes around its top-level conversation array.

    ``elements[i]`` is the ``(start, end)`` byte span of the array's i-th element; ``close``
    is the offset of the array's ``]``. Found with ``json.JSONDecoder.raw_decode``, so the
    spans are exactly the SDK's bytes (no re-serialisation).
    """

    raw: bytes
    elements: tuple[tuple[int, int], ...]
    close: int

    @classmethod
    def of(cls, raw: bytes, key: str) -> Body:
        text = raw.decode("utf-8")
        decoder = json.JSONDecoder()
        spans: list[tuple[int, int]] = []

        def skip(at: int) -> int:
            match = _SPACE.match(text, at)
            assert match is not None
            return match.end()

        at = skip(0)
        assert text[at] == "{", raw
        at = skip(at + 1)
        while True:
            name, at = decoder.raw_decode(text, at)
            at = skip(at)
            assert text[at] == ":"
            at = skip(at + 1)
            if name != key:
                _, at = decoder.raw_decode(text, at)
            else:
                assert text[at] == "["
                at = skip(at + 1)
                while text[at] != "]":
                    _, end = decoder.raw_decode(text, at)
                    spans.append((at, end))
                    at = skip(end)
                    if text[at] == ",":
                        at = skip(at + 1)
                close = at
                at += 1
            at = skip(at)
            if text[at] == "}":
                break
            assert text[at] == ","
            at = skip(at + 1)

        def to_bytes(offset: int) -> int:
            return len(text[:offset].encode("utf-8"))

        return cls(
            raw,
            tuple((to_bytes(s), to_bytes(e)) for s, e in spans),
            to_bytes(close),
        )

    def element(self, index: int) -> bytes:
        start, end = self.elements[index]
        return self.raw[start:end]

    def through(self, count: int) -> bytes:
        """The raw bytes from the body's start through the end of element ``count - 1``."""
        return self.raw[: self.elements[count - 1][1]]

    def before_array(self) -> bytes:
        """The raw bytes before the first element (the fields that precede the array)."""
        return self.raw[: self.elements[0][0]]

    def after_array(self) -> bytes:
        """The raw bytes from the array's closing ``]`` to the end (the fields after it)."""
        return self.raw[self.close :]

    def parsed(self, start: int, stop: int | None = None) -> list[Json]:
        stop = len(self.elements) if stop is None else stop
        return [json.loads(self.element(i)) for i in range(start, stop)]


def without_cache_markers(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_cache_markers(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_markers(v) for v in value]
    return value


def assert_byte_stable(
    adapter: Adapter,
    reference: tuple[bytes, bytes],
    before_crash: bytes,
    resumed: bytes,
) -> None:
    """The assertions the module docstring describes under "What byte-stable asserts"."""
    key, k = adapter.array, adapter.kept
    first, second = (Body.of(raw, key) for raw in reference)
    pre, post = Body.of(before_crash, key), Body.of(resumed, key)

    # 1. Up to the crash, the killed process asked exactly what the reference asked.
    assert pre.raw == first.raw

    # 2. The resumed request keeps the reference's bytes through the assistant's tool-call
    #    turn, and after the conversation; only the answers to the batch differ.
    assert len(second.elements) > k
    assert len(post.elements) > k
    assert post.through(k) == second.through(k)
    assert post.after_array() == second.after_array()
    lookup_id, notify_id = adapter.call_ids
    assert adapter.answers(second.parsed(k)) == [
        (lookup_id, LOOKUP_RESULT),
        (notify_id, NOTIFY_RESULT),
    ]
    assert adapter.answers(post.parsed(k)) == [(lookup_id, LOOKUP_RESULT), (notify_id, INTERRUPTED)]

    # 3. What the pre-crash request already carried is carried again unchanged.
    assert post.before_array() == pre.before_array()
    assert post.after_array() == pre.after_array()
    carried = len(pre.elements)
    if adapter.moves_cache_marker:
        # The marker sits on the newest block of a request, so it moved off the question.
        assert pre.through(carried) != post.through(carried)
        assert without_cache_markers(pre.parsed(0)) == post.parsed(0, carried)
    else:
        assert post.through(carried) == pre.through(carried)


# -- the scenario -------------------------------------------------------------------------------


@dataclass
class Reference:
    requests: tuple[bytes, bytes]
    transcript: list[Message]
    batch_operations: int  # store operations done when both tools were running


def run_reference(adapter: Adapter, server: Any, home: Path) -> Reference:
    bench = Bench(gated=True)
    seen = len(server.requests)
    server.queue(adapter.tool_reply(server), adapter.text_reply(server))
    with agent_process(adapter, server.url, home, bench) as system:
        agent = system.create(id=AGENT)
        try:
            agent.send(ak.user(QUESTION))
            bench.wait_both_running()  # the batch is durable: calls start only after its commit
            operations = system.internals.store.statistics().operations
        finally:
            bench.release()
        assert agent.wait_for_idle(timeout_seconds=WAIT_SECONDS)
        transcript = agent.transcript()
    assert bench.runs == Counter(lookup=1, notify=1)
    requests = server.requests[seen:]
    assert [r.path for r in requests] == [adapter.path, adapter.path]
    assert [text_of(m) for m in transcript] == [
        QUESTION,
        text_of(transcript[1]),
        LOOKUP_RESULT,
        NOTIFY_RESULT,
        FINAL,
    ]
    return Reference((requests[0].body, requests[1].body), transcript, operations)


def text_of(message: Message) -> str:
    return "".join(b.text for b in getattr(message, "content", ()) if isinstance(b, TextBlock))


def tool_calls(message: Message) -> list[ToolCallBlock]:
    assert isinstance(message, AssistantMessage)
    return [b for b in message.content if isinstance(b, ToolCallBlock)]


def assert_killed_inside_the_batch(
    adapter: Adapter, system: ak.AgentSystem, reference: Reference
) -> None:
    """The durable state the dead process left: the batch committed, no result committed."""
    transcript = system.transcript(AGENT)
    assert transcript == reference.transcript[:2]  # the question, the assistant tool-call turn
    assert isinstance(transcript[-1], AssistantMessage)
    pending = system.internals.store.read(lambda tx: tx.calls.pending(AGENT))
    assert [(p.index, p.call.call_id, p.committed) for p in pending] == [
        (0, adapter.call_ids[0], None),
        (1, adapter.call_ids[1], None),
    ]
    owed = system.internals.store.read(lambda tx: tx.facts.read_owed(AGENT))
    assert owed is not None
    assert owed.stage == "tools"


def resume_and_finish(adapter: Adapter, server: Any, home: Path, reference: Reference) -> bytes:
    """Open the dead process's directory, check what it left, resume; the resumed request."""
    bench = Bench()
    seen = len(server.requests)
    with agent_process(adapter, server.url, home, bench, resume=False) as system:
        assert_killed_inside_the_batch(adapter, system, reference)
        server.queue(adapter.text_reply(server))
        assert system.start() == [AGENT]
        assert system.wait_for_idle(AGENT, timeout_seconds=WAIT_SECONDS)
        transcript = system.transcript(AGENT)
        owed_and_pending = system.internals.store.read(
            lambda tx: (tx.facts.read_owed(AGENT), tx.calls.pending(AGENT))
        )

    assert owed_and_pending == (None, [])
    # The same conversation as the reference, except the non-durable call's answer.
    assert transcript[:2] == reference.transcript[:2]
    lookup, notify = transcript[2:4]
    assert isinstance(lookup, ToolResultMessage)
    assert isinstance(notify, ToolResultMessage)
    assert (lookup.call_id, text_of(lookup), lookup.is_error) == (
        adapter.call_ids[0],
        LOOKUP_RESULT,
        False,
    )
    assert (notify.call_id, text_of(notify), notify.is_error) == (
        adapter.call_ids[1],
        INTERRUPTED,
        True,
    )
    assert text_of(transcript[4]) == FINAL
    assert len(transcript) == 5
    # Every call answered exactly once, in call order.
    answered = [m.call_id for m in transcript if isinstance(m, ToolResultMessage)]
    assert answered == [c.call_id for c in tool_calls(transcript[1])] == list(adapter.call_ids)
    # The durable tool ran again; the non-durable one did not.
    assert bench.runs == Counter(lookup=1)
    requests = server.requests[seen:]
    assert [r.path for r in requests] == [adapter.path]
    body: bytes = requests[0].body
    return body


def assert_reasoning_was_kept(adapter: Adapter, transcript: list[Message]) -> None:
    """The assistant turn holds the vendor's reasoning payload (the bytes checked on the wire)."""
    turn = transcript[1]
    assert isinstance(turn, AssistantMessage)
    reasoning = [b for b in turn.content if isinstance(b, ReasoningBlock)]
    if adapter.name == "anthropic":
        assert [b.reasoning for b in reasoning] == [SIGNATURE]
    elif adapter.name == "openai-responses":
        assert [b.reasoning for b in reasoning] == [ENCRYPTED]


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda adapter: adapter.name)
def test_an_agent_killed_inside_a_tool_batch_resumes_with_a_byte_stable_replay(
    adapter: Adapter, server: Any, tmp_path: Path
) -> None:
    reference = run_reference(adapter, server, tmp_path / "reference")
    assert isinstance(reference.transcript[0], UserMessage)
    assert_reasoning_was_kept(adapter, reference.transcript)

    # The killed process: the fault is the first store operation after the batch is running.
    home = tmp_path / "killed"
    crashing = Bench(gated=True)
    seen = len(server.requests)
    server.queue(adapter.tool_reply(server))  # one answer only: a dead process asks no more
    plan = FaultPlan(at=reference.batch_operations + 1, mode="crash")
    with agent_process(adapter, server.url, home, crashing, faults=plan) as system:
        agent = system.create(id=AGENT)
        try:
            agent.send(ak.user(QUESTION))
            crashing.wait_both_running()
            # Same operations as the reference so far: the next one (the first result's
            # commit) is the one that fails.
            assert system.internals.store.statistics().operations == reference.batch_operations
        finally:
            crashing.release()
        # Leaving the block closes the system: it waits for the agent, whose commit failed.
    assert crashing.runs == Counter(lookup=1, notify=1)
    before_crash = server.requests[seen:]
    assert [r.path for r in before_crash] == [adapter.path]

    resumed = resume_and_finish(adapter, server, home, reference)

    assert_byte_stable(adapter, reference.requests, before_crash[0].body, resumed)
    if adapter.name == "anthropic":
        assert f'"signature":"{SIGNATURE}"'.encode() in Body.of(resumed, "messages").element(1)
    if adapter.name == "openai-responses":
        assert f'"encrypted_content":"{ENCRYPTED}"'.encode() in Body.of(resumed, "input").element(1)


def run_killed_child(adapter: Adapter, url: str, home: Path, fault_at: int, ledger: Path) -> None:
    """The child process of the SIGKILL test (this file run as a script)."""
    bench = Bench(lookup_after_notify=True, ledger=ledger)
    plan = FaultPlan(at=fault_at, mode="kill")
    with agent_process(adapter, url, home, bench, faults=plan) as system:
        agent = system.create(id=AGENT)
        agent.send(ak.user(QUESTION))
        agent.wait_for_idle(timeout_seconds=WAIT_SECONDS)
    raise SystemExit(3)  # reached only if the kill never fired


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda adapter: adapter.name)
def test_a_process_sigkilled_inside_a_tool_batch_resumes_with_a_byte_stable_replay(
    adapter: Adapter, server: Any, tmp_path: Path
) -> None:
    """The same scenario with a real process death: the child sends itself ``SIGKILL`` at the
    first store operation after the batch is running (no ``finally``, no flush, no close)."""
    reference = run_reference(adapter, server, tmp_path / "reference")
    home, ledger = tmp_path / "killed", tmp_path / "ledger.txt"
    seen = len(server.requests)
    server.queue(adapter.tool_reply(server))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTKEEP_FAULT_")}
    child = subprocess.run(
        [
            sys.executable,
            __file__,
            adapter.name,
            server.url,
            str(home),
            str(reference.batch_operations + 1),
            str(ledger),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )

    assert child.returncode == -signal.SIGKILL, (
        child.returncode,
        child.stdout[-2000:],
        child.stderr[-2000:],
    )
    assert "store_fault_injected" in child.stdout + child.stderr
    assert Counter(ledger.read_text().split()) == Counter(lookup=1, notify=1)
    before_crash = server.requests[seen:]
    assert [r.path for r in before_crash] == [adapter.path]

    resumed = resume_and_finish(adapter, server, home, reference)

    assert_byte_stable(adapter, reference.requests, before_crash[0].body, resumed)


if __name__ == "__main__":
    name, url, home, fault_at, ledger = sys.argv[1:]
    run_killed_child(BY_NAME[name], url, Path(home), int(fault_at), Path(ledger))
