"""What a provider streams back: the events of one response, ending in exactly one ``Done``.

Every event is an immutable msgspec Struct tagged by ``type``, so it round-trips through JSON
unchanged (the loop forwards them to observers and tests replay them). Opaque vendor payloads
are kept verbatim, as in :mod:`agentkeep.types.content`.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import msgspec

from agentkeep.types.content import OutputBlock, Tokens, Usage


class _Value(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of every stream value: immutable, keyword-only, compact JSON (as in ``content``)."""


# -- errors -------------------------------------------------------------------------------

ErrorKind: TypeAlias = Literal["internal_error", "context_overflow", "billing_error", "unknown"]
ProviderErrorType: TypeAlias = Literal[
    "authentication",
    "out_of_tokens",
    "rate_limit",
    "server_overloaded",
    "internal_server_error",
    "empty_response",
    "unclassified",
]


class ProviderErrorInfo(_Value, frozen=True):
    """What a provider said about a failed request, carried by an error :class:`Done`.

    ``type`` classifies the failure (authentication, rate limit, ...); ``reset_at_ms`` is when a
    limit resets, if the vendor said; ``diagnostics`` holds a bounded set of details (attempts, HTTP
    status, request id, vendor code).
    """

    type: ProviderErrorType
    reset_at_ms: int | None = None
    # Bounded diagnostics: attempts, HTTP status, request id, vendor code, ...
    diagnostics: dict[str, str | int | float | bool | None] = {}


# -- stream events ------------------------------------------------------------------------


class _Event(_Value, frozen=True, tag_field="type"):
    pass


class BlockStart(_Event, frozen=True, tag="block_start"):
    """Opens a tentative attempt: what follows is kept on ``block_stop``."""


class BlockStop(_Event, frozen=True, tag="block_stop"):
    """Commits the blocks finished since the matching ``block_start``."""


class BlockReset(_Event, frozen=True, tag="block_reset"):
    """Discards the blocks finished since the matching ``block_start`` (usually a retry)."""


class TextStart(_Event, frozen=True, tag="text_start"):
    """A text block begins."""


class TextDelta(_Event, frozen=True, tag="text_delta"):
    """The next piece of the text block being streamed."""

    delta: str


class TextEnd(_Event, frozen=True, tag="text_end"):
    """The text block is finished: ``text`` is all of it."""

    text: str  # the whole finished text
    vendor: str | None = None  # see TextBlock.vendor


class ReasoningStart(_Event, frozen=True, tag="reasoning_start"):
    """A reasoning block begins."""


class ReasoningDelta(_Event, frozen=True, tag="reasoning_delta"):
    """The next piece of the reasoning text being streamed."""

    delta: str


class ReasoningEnd(_Event, frozen=True, tag="reasoning_end"):
    """The reasoning block is finished: its readable ``text`` and opaque ``reasoning`` payload."""

    text: str | None = None
    reasoning: str | None = None  # opaque signed payload
    vendor: str | None = None


class ToolCallStart(_Event, frozen=True, tag="toolcall_start"):
    """A tool call begins: its provider id, the tool's name and namespace, and whether the provider
    runs it (``server``).
    """

    call_id: str
    name: str
    namespace: str | None = None
    server: bool = False
    vendor: str | None = None


class ToolCallDelta(_Event, frozen=True, tag="toolcall_delta"):
    """The next piece of the call's JSON arguments being streamed."""

    call_id: str
    delta: str


class ToolCallEnd(_Event, frozen=True, tag="toolcall_end"):
    """The tool call is finished: ``arguments`` is the final raw JSON text; ``incomplete`` if it was
    cut off.
    """

    call_id: str
    arguments: str  # the final raw JSON text
    incomplete: bool = False


class ToolResultStart(_Event, frozen=True, tag="toolcall_result_start"):
    """A provider-owned (server) tool call's result begins."""

    call_id: str
    vendor: str | None = None


class ToolResultDelta(_Event, frozen=True, tag="toolcall_result_delta"):
    """The next piece of a server tool result being streamed."""

    call_id: str
    delta: str


class ToolResultEnd(_Event, frozen=True, tag="toolcall_result_end"):
    """A server tool call's result is finished: its content and whether it failed."""

    call_id: str
    content: tuple[OutputBlock, ...] = ()
    is_error: bool = False
    incomplete: bool = False
    # The finished vendor item (an OpenAI server tool item is only final at output_item.done).
    vendor: str | None = None


class Retrying(_Event, frozen=True, tag="retrying"):
    """The provider will retry the request (``attempt``, 1-based) after ``delay_seconds``, because
    of ``reason``.
    """

    attempt: int  # 1-based number of the retry about to happen
    reason: str
    delay_seconds: float = 0.0
    # How the attempt failed, when the provider classified it (metrics count retries by it).
    error_type: ProviderErrorType | None = None


class TokenUsage(_Event, frozen=True, tag="token_usage"):
    """Token usage of the attempt, as the provider reported it."""

    usage: Usage


DoneState: TypeAlias = Literal["normal", "tool_call", "length", "cancelled", "error"]


class Done(_Event, frozen=True, tag="done"):
    """The one terminal event of a response.

    ``tokens`` is present for ``normal``, ``tool_call`` and ``length``; ``kind``, ``message``
    and optionally ``provider_error`` for ``error``.
    """

    state: DoneState
    tokens: Tokens | None = None
    end_turn: bool | None = None
    kind: ErrorKind | None = None
    message: str | None = None
    provider_error: ProviderErrorInfo | None = None


StreamEvent: TypeAlias = (
    BlockStart
    | BlockStop
    | BlockReset
    | TextStart
    | TextDelta
    | TextEnd
    | ReasoningStart
    | ReasoningDelta
    | ReasoningEnd
    | ToolCallStart
    | ToolCallDelta
    | ToolCallEnd
    | ToolResultStart
    | ToolResultDelta
    | ToolResultEnd
    | Retrying
    | TokenUsage
    | Done
)


def done_error(
    message: str,
    *,
    kind: ErrorKind = "internal_error",
    provider_error: ProviderErrorInfo | None = None,
) -> Done:
    """The terminal event of a response that failed."""
    return Done(state="error", kind=kind, message=message, provider_error=provider_error)


DONE_CANCELLED = Done(state="cancelled")
