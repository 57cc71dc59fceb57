"""Short-hands for :class:`~agentkeep.providers.scripted.ScriptedModel` responses.

Each function returns one :class:`ScriptedResponse`: the steps one ``stream`` call replays.
A step is a stream event, a :class:`ScriptedCall` (rendered to start/delta/end events at replay
time, so a call without an explicit id gets a unique one), :data:`HANG` (block until the
cancel token fires) or a deliberate protocol violation (:class:`Raise`, ``END_WITHOUT_DONE``).

Example:
    >>> from agentkeep.providers import script
    >>> responses = [script.tool_call("add", {"a": 1}), script.text("3")]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast, get_args

import msgspec

from agentkeep.providers.local_model_session import END_WITHOUT_DONE, EndWithoutDone
from agentkeep.types import (
    BlockReset,
    BlockStart,
    BlockStop,
    CompactionCompleted,
    CompactionFailed,
    Done,
    DoneState,
    ErrorKind,
    Message,
    OutputBlock,
    ProviderErrorInfo,
    ProviderErrorType,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    Retrying,
    StreamEvent,
    TextBlock,
    TextDelta,
    TextEnd,
    TextStart,
    Tokens,
    TokenUsage,
    ToolResultDelta,
    ToolResultEnd,
    ToolResultStart,
    Usage,
    done_error,
)


class Hang:
    """Step: block until the request's cancel token fires, then end ``Done(cancelled)``."""


HANG = Hang()


@dataclass(frozen=True)
class Raise:
    """Step: raise ``exception`` out of the stream iterator (a broken provider)."""

    exception: BaseException


@dataclass(frozen=True, kw_only=True)
class ScriptedCall:
    """Step: one tool call, rendered as ``toolcall_start``, deltas and ``toolcall_end``.

    ``call_id=None`` gets ``call-<request number>-<position>`` at replay time.
    """

    name: str
    arguments: str
    call_id: str | None = None
    namespace: str | None = None
    incomplete: bool = False
    server: bool = False
    chunks: int = 1


ScriptStep: TypeAlias = StreamEvent | ScriptedCall | Hang | Raise | EndWithoutDone


@dataclass(frozen=True)
class ScriptedResponse:
    """The steps one ``stream`` call replays, in order."""

    steps: tuple[ScriptStep, ...]


DEFAULT_TOKENS = Tokens(input=10, output=5)

# -- values ---------------------------------------------------------------------------------


def tokens(input: int, output: int) -> Tokens:
    """Token counts for a ``done`` event: the whole input context and the output."""
    return Tokens(input=input, output=output)


def usage(input: int, output: int, *, cache_read: int = 0, cache_write: int = 0) -> TokenUsage:
    """A ``token_usage`` event."""
    return TokenUsage(
        usage=Usage(input=input, output=output, cache_read=cache_read, cache_write=cache_write)
    )


def done(
    state: DoneState = "normal", *, tokens: Tokens | None = None, end_turn: bool | None = None
) -> Done:
    """A terminal event; ``tokens`` defaults to :data:`DEFAULT_TOKENS` where the state has one."""
    if state in ("normal", "tool_call", "length") and tokens is None:
        tokens = DEFAULT_TOKENS
    return Done(state=state, tokens=tokens, end_turn=end_turn)


def _split(text: str, chunks: int) -> list[str]:
    if chunks <= 1 or len(text) <= 1:
        return [text]
    size = -(-len(text) // min(chunks, len(text)))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _text_events(text: str, chunks: int, vendor: str | None = None) -> list[ScriptStep]:
    deltas: list[ScriptStep] = [TextDelta(delta=part) for part in _split(text, chunks)]
    return [TextStart(), *deltas, TextEnd(text=text, vendor=vendor)]


def _arguments_text(arguments: Mapping[str, object] | str | None) -> str:
    if arguments is None:
        return ""
    if isinstance(arguments, str):
        return arguments
    return msgspec.json.encode(dict(arguments)).decode()


# -- responses ------------------------------------------------------------------------------


def events(*steps: ScriptStep) -> ScriptedResponse:
    """A response made of exactly these steps (raw events, calls, hangs…)."""
    return ScriptedResponse(tuple(steps))


def text(
    text: str,
    *,
    chunks: int = 1,
    tokens: Tokens = DEFAULT_TOKENS,
    end_turn: bool | None = None,
    vendor: str | None = None,
) -> ScriptedResponse:
    """A text answer in ``chunks`` deltas, ending ``done(normal)``."""
    steps = [*_text_events(text, chunks, vendor), done("normal", tokens=tokens, end_turn=end_turn)]
    return ScriptedResponse(tuple(steps))


def reasoning(
    text: str | None,
    *,
    signature: str | None = None,
    vendor: str | None = None,
    answer: str | None = None,
    chunks: int = 1,
    tokens: Tokens = DEFAULT_TOKENS,
) -> ScriptedResponse:
    """A reasoning block (with its opaque ``signature``), optionally followed by ``answer``."""
    steps: list[ScriptStep] = [ReasoningStart()]
    if text:
        steps += [ReasoningDelta(delta=part) for part in _split(text, chunks)]
    steps.append(ReasoningEnd(text=text, reasoning=signature, vendor=vendor))
    if answer is not None:
        steps += _text_events(answer, chunks)
    steps.append(done("normal", tokens=tokens))
    return ScriptedResponse(tuple(steps))


def call(
    name: str,
    arguments: Mapping[str, object] | str | None = None,
    *,
    call_id: str | None = None,
    namespace: str | None = None,
    incomplete: bool = False,
    chunks: int = 1,
) -> ScriptedCall:
    """One tool call for :func:`tool_calls`; ``arguments`` as a mapping or raw JSON text."""
    return ScriptedCall(
        name=name,
        arguments=_arguments_text(arguments),
        call_id=call_id,
        namespace=namespace,
        incomplete=incomplete,
        chunks=chunks,
    )


def tool_calls(
    *calls: ScriptedCall, text: str | None = None, tokens: Tokens = DEFAULT_TOKENS
) -> ScriptedResponse:
    """Optional text, then several tool calls, ending ``done(tool_call)``."""
    steps: list[ScriptStep] = _text_events(text, 1) if text is not None else []
    steps += calls
    steps.append(done("tool_call", tokens=tokens))
    return ScriptedResponse(tuple(steps))


def tool_call(
    name: str,
    arguments: Mapping[str, object] | str | None = None,
    *,
    call_id: str | None = None,
    namespace: str | None = None,
    text: str | None = None,
    tokens: Tokens = DEFAULT_TOKENS,
) -> ScriptedResponse:
    """One tool call ending ``done(tool_call)`` (``call_id`` generated when omitted)."""
    scripted = call(name, arguments, call_id=call_id, namespace=namespace)
    return tool_calls(scripted, text=text, tokens=tokens)


def server_tool_call(
    name: str,
    arguments: Mapping[str, object] | str | None = None,
    *,
    result: str | Sequence[OutputBlock] = "",
    call_id: str | None = None,
    is_error: bool = False,
    vendor: str | None = None,
    answer: str | None = None,
    tokens: Tokens = DEFAULT_TOKENS,
) -> ScriptedResponse:
    """A provider-owned (server) tool call and its result, then ``answer``, ``done(normal)``.

    ``call_id`` is required to pair the result with its call, so it defaults to
    ``server-<name>``.
    """
    the_id = call_id if call_id is not None else f"server-{name}"
    content: tuple[OutputBlock, ...] = (
        (TextBlock(text=result),) if isinstance(result, str) else tuple(result)
    )
    rendered = "".join(block.text for block in content if isinstance(block, TextBlock))
    steps: list[ScriptStep] = [
        ScriptedCall(name=name, arguments=_arguments_text(arguments), call_id=the_id, server=True),
        ToolResultStart(call_id=the_id, vendor=vendor),
    ]
    if rendered:
        steps.append(ToolResultDelta(call_id=the_id, delta=rendered))
    steps.append(ToolResultEnd(call_id=the_id, content=content, is_error=is_error, vendor=vendor))
    if answer is not None:
        steps += _text_events(answer, 1)
    steps.append(done("normal", tokens=tokens))
    return ScriptedResponse(tuple(steps))


_ERROR_KINDS: tuple[str, ...] = get_args(ErrorKind)
_PROVIDER_ERROR_TYPES: tuple[str, ...] = get_args(ProviderErrorType)
_ALIASES = {"overloaded": "server_overloaded", "rate_limited": "rate_limit"}


def error(
    kind_or_type: str = "internal_error",
    message: str | None = None,
    *,
    reset_at_ms: int | None = None,
    diagnostics: Mapping[str, str | int | float | bool | None] | None = None,
    before: Sequence[ScriptStep] = (),
) -> ScriptedResponse:
    """A failed response: ``before`` steps, then ``done(error)``.

    Args:
        kind_or_type: An error kind (``internal_error``, ``context_overflow``,
            ``billing_error``, ``unknown``) or a provider error type (``rate_limit``,
            ``server_overloaded`` alias ``overloaded``, ``authentication``, …), which sets
            ``provider_error`` and the matching kind.
        message: The error message (a readable default otherwise).
        reset_at_ms: For ``rate_limit``/``out_of_tokens``: when the limit resets.
        diagnostics: Bounded provider diagnostics.
        before: Steps emitted before the failure (partial output).
    """
    name = _ALIASES.get(kind_or_type, kind_or_type)
    provider_error: ProviderErrorInfo | None = None
    if name in _ERROR_KINDS:
        kind = cast(ErrorKind, name)
    elif name in _PROVIDER_ERROR_TYPES:
        kind = "billing_error" if name == "out_of_tokens" else "internal_error"
        provider_error = ProviderErrorInfo(
            type=cast(ProviderErrorType, name),
            reset_at_ms=reset_at_ms,
            diagnostics=dict(diagnostics or {}),
        )
    else:
        known = ", ".join((*_ERROR_KINDS, *_PROVIDER_ERROR_TYPES, *_ALIASES))
        raise ValueError(f"Unknown error {kind_or_type!r}; expected one of {known}.")
    the_message = message if message is not None else f"Scripted {name.replace('_', ' ')}."
    terminal = done_error(the_message, kind=kind, provider_error=provider_error)
    return ScriptedResponse((*before, terminal))


def retry_then(
    response: ScriptedResponse,
    *,
    attempts: int = 1,
    reason: str = "The server is overloaded.",
    partial: str = "partial",
    delay_seconds: float = 0.0,
    error_type: ProviderErrorType | None = None,
) -> ScriptedResponse:
    """``attempts`` failed attempts (``block_start``, partial text, ``block_reset``,
    ``retrying``, classified as ``error_type`` if given), then ``response`` inside
    ``block_start … block_stop``."""
    steps: list[ScriptStep] = []
    for attempt in range(1, attempts + 1):
        steps += [BlockStart(), *_text_events(partial, 1), BlockReset()]
        steps.append(
            Retrying(
                attempt=attempt,
                reason=reason,
                delay_seconds=delay_seconds,
                error_type=error_type,
            )
        )
    body = [step for step in response.steps if not isinstance(step, Done)]
    terminal = [step for step in response.steps if isinstance(step, Done)]
    steps += [BlockStart(), *body, BlockStop(), *terminal]
    return ScriptedResponse(tuple(steps))


def hang(*, before: Sequence[ScriptStep] = ()) -> ScriptedResponse:
    """``before`` steps, then block until cancelled and end ``done(cancelled)``."""
    return ScriptedResponse((*before, HANG))


def incomplete_block(
    text: str = "partial", *, state: DoneState = "length", tokens: Tokens = DEFAULT_TOKENS
) -> ScriptedResponse:
    """A text block that starts and streams but never ends, then ``done(state)``."""
    terminal = (
        done_error("Scripted failure mid-block.")
        if state == "error"
        else done(state, tokens=tokens)
    )
    return ScriptedResponse((TextStart(), TextDelta(delta=text), terminal))


def incomplete_tool_call(
    name: str,
    partial_arguments: str = '{"a": ',
    *,
    call_id: str | None = None,
    tokens: Tokens = DEFAULT_TOKENS,
) -> ScriptedResponse:
    """A tool call cut off by the output limit (``incomplete``), then ``done(length)``."""
    scripted = ScriptedCall(
        name=name, arguments=partial_arguments, call_id=call_id, incomplete=True
    )
    return ScriptedResponse((scripted, done("length", tokens=tokens)))


def raises(exception: BaseException, *, before: Sequence[ScriptStep] = ()) -> ScriptedResponse:
    """Protocol violation: ``before`` steps, then the iterator raises ``exception``."""
    return ScriptedResponse((*before, Raise(exception)))


def without_done(*steps: ScriptStep) -> ScriptedResponse:
    """Protocol violation: these steps, then the iterator ends with no ``done`` at all."""
    return ScriptedResponse((*steps, END_WITHOUT_DONE))


# -- compactions ----------------------------------------------------------------------------


def compacted(
    *messages: Message, summary: str | None = None, usage: Usage | None = None
) -> CompactionCompleted:
    """A completed compaction whose replacement context is ``messages``."""
    return CompactionCompleted(messages=tuple(messages), summary=summary, usage=usage)


def compaction_failed(
    message: str = "Scripted compaction failure.", *, kind: str = "inference_error"
) -> CompactionFailed:
    """A failed compaction (``inference_error``, ``invalid_summary`` or ``tool_call``)."""
    if kind not in ("inference_error", "invalid_summary", "tool_call"):
        raise ValueError(f"Unknown compaction failure kind {kind!r}.")
    return CompactionFailed(kind=kind, message=message)  # type: ignore[arg-type]


__all__ = [
    "DEFAULT_TOKENS",
    "HANG",
    "EndWithoutDone",
    "Hang",
    "Raise",
    "ScriptStep",
    "ScriptedCall",
    "ScriptedResponse",
    "call",
    "compacted",
    "compaction_failed",
    "done",
    "error",
    "events",
    "hang",
    "incomplete_block",
    "incomplete_tool_call",
    "raises",
    "reasoning",
    "retry_then",
    "server_tool_call",
    "text",
    "tokens",
    "tool_call",
    "tool_calls",
    "usage",
    "without_done",
]
