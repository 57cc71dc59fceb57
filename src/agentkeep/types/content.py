"""Conversation content: blocks, messages, tokens, and what a request or compaction runs on.

Every value is an immutable msgspec Struct; unions are tagged (``type`` for blocks, ``role`` for
messages) so a value round-trips through JSON unchanged. Opaque vendor payloads
(``vendor``, signed ``reasoning``, ``encrypted_content``) are strings kept verbatim: agentkeep
never parses them, so what a vendor signed is exactly what it gets back.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec


class Value(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Base of every protocol value: immutable, keyword-only, compact JSON."""


# -- content blocks -----------------------------------------------------------------------


class TextBlock(Value, frozen=True, tag="text"):
    """Plain text, in any message or tool result."""

    text: str
    # Opaque vendor payload kept verbatim: Anthropic citations, an OpenAI output message's
    # id and ``phase`` (which must be resent on later requests).
    vendor: str | None = None


class ImageBlock(Value, frozen=True, tag="image"):
    """An image, as base64 ``data`` of the given ``mime_type``."""

    data: str  # base64, without a data: prefix
    mime_type: str


class ReasoningBlock(Value, frozen=True, tag="reasoning"):
    """The model's reasoning: readable ``text``, an opaque signed ``reasoning`` payload, or both.

    The payload is sent back to the vendor verbatim on later requests; agentkeep never reads it.
    """

    text: str | None = None
    reasoning: str | None = None  # opaque signed/encrypted payload, sent back verbatim
    vendor: str | None = None


class ToolCallBlock(Value, frozen=True, tag="tool_call"):
    """A tool call the model made, as part of an assistant message.

    ``arguments`` is the raw JSON text the model produced (parsed only when the call runs);
    ``incomplete`` marks a call cut off mid-stream, which is never executed; a ``server`` call is
    the provider's own and is neither executed nor answered by the agent.
    """

    call_id: str  # the provider's own id for the call
    name: str
    arguments: str  # raw JSON text as the model produced it
    namespace: str | None = None
    incomplete: bool = False
    server: bool = False  # provider-owned: never executed or answered by the agent
    vendor: str | None = None


class ServerToolResultBlock(Value, frozen=True, tag="tool_result"):
    """The result of a provider-owned (server) tool call, kept in the assistant message.

    It keeps the vendors' word, like ``ToolCallBlock.server``: its tag and fields are stored in
    the database, and its name pairs it with that stored flag (``ak.ProviderTool`` declares
    the tool; what comes back is the provider's server call and its result)."""

    call_id: str
    content: tuple[TextBlock | ImageBlock, ...] = ()
    is_error: bool = False
    incomplete: bool = False
    vendor: str | None = None


class ToolCallRequestBlock(Value, frozen=True, tag="tool_call_request"):
    """A control block of a queued user message: run this tool call before asking the model.

    Only user messages may carry one (at most one each). The runtime executes it like a call
    the model made — same resolution, validation, hooks, results and recovery — under an id of
    its own; providers never see the block itself (the loop's provider view strips it).
    """

    name: str
    arguments: dict[str, Any] = {}  # a JSON object; omitted means {}
    namespace: str | None = None


class ReferenceBlock(Value, frozen=True, tag="reference"):
    """A reference the host resolves (the wire's ``ReferencePart``): a file, a URL.

    Kept verbatim in the conversation; a model is shown it as a line of text
    (:func:`input_blocks`, :func:`reference_text`), since agentkeep does not fetch it.
    """

    uri: str
    name: str | None = None
    media_type: str | None = None


class DataBlock(Value, frozen=True, tag="data"):
    """Named JSON data (the wire's ``DataPart``), kept verbatim; a model is shown it as a
    line of text naming it, with the data as compact JSON (:func:`input_blocks`)."""

    name: str
    data: Any = None


InputBlock: TypeAlias = TextBlock | ImageBlock
UserBlock: TypeAlias = TextBlock | ImageBlock | ReferenceBlock | DataBlock | ToolCallRequestBlock
OutputBlock: TypeAlias = TextBlock | ImageBlock
AgentContentBlock: TypeAlias = TextBlock | ImageBlock | ReasoningBlock
AssistantBlock: TypeAlias = TextBlock | ReasoningBlock | ToolCallBlock | ServerToolResultBlock

# -- messages -----------------------------------------------------------------------------


class _Message(Value, frozen=True, tag_field="role"):
    pass


class UserMessage(_Message, frozen=True, tag="user"):
    """A message from the user: text and images, and at most one :class:`ToolCallRequestBlock`."""

    # A queued message may carry one ToolCallRequestBlock; providers only ever get
    # ``input_blocks(content)``.
    content: tuple[UserBlock, ...]


class SystemMessage(_Message, frozen=True, tag="system"):
    """A system message queued into the conversation: text and images (see
    :func:`agentkeep.system`).
    """

    content: tuple[InputBlock, ...]


class Author(Value, frozen=True):
    """Who wrote an :class:`AgentMessage`: an agent's ``id`` and an optional ``description``."""

    id: str
    description: str = ""


class AgentMessage(_Message, frozen=True, tag="agent"):
    """A message written by another agent (a subagent's report, for instance)."""

    author: Author
    content: tuple[AgentContentBlock, ...]


class AssistantMessage(_Message, frozen=True, tag="assistant"):
    """The model's reply.

    Its blocks (text, reasoning, tool calls, server tool results) in the order they started.
    """

    content: tuple[AssistantBlock, ...]  # in the order the blocks started


class ToolResultMessage(_Message, frozen=True, tag="tool"):
    """The result of one tool call, answering the call whose provider id is ``call_id``;
    ``is_error`` marks a failure the model is told about.
    """

    call_id: str  # the provider's id of the call this answers
    content: tuple[OutputBlock, ...]
    is_error: bool = False
    vendor: str | None = None


class CompactionMessage(_Message, frozen=True, tag="compaction"):
    """What a compaction left in place of the history it replaced: a readable summary (``content``),
    a vendor's opaque ``encrypted_content``, or both.
    """

    content: str | None = None
    encrypted_content: str | None = None
    vendor: str | None = None


def reference_text(block: ReferenceBlock) -> str:
    """How a model is shown a reference: ``[reference: <name> <uri> (<media type>)]``."""
    label = f"{block.name} " if block.name else ""
    kind = f" ({block.media_type})" if block.media_type else ""
    return f"[reference: {label}<{block.uri}>{kind}]"


def data_text(block: DataBlock) -> str:
    """How a model is shown named data: ``[data <name>: <compact JSON>]``."""
    return f"[data {block.name}: {msgspec.json.encode(block.data).decode()}]"


def input_blocks(blocks: tuple[UserBlock, ...]) -> tuple[InputBlock, ...]:
    """The ordinary content of a user message as a provider gets it: its text and images,
    a reference or data block as a text block (:func:`reference_text`, :func:`data_text`),
    never a control block. The one place the native loop decides how a model sees them."""
    shown: list[InputBlock] = []
    for block in blocks:
        if isinstance(block, TextBlock | ImageBlock):
            shown.append(block)
        elif isinstance(block, ReferenceBlock):
            shown.append(TextBlock(text=reference_text(block)))
        elif isinstance(block, DataBlock):
            shown.append(TextBlock(text=data_text(block)))
    return tuple(shown)


Message: TypeAlias = (
    UserMessage
    | SystemMessage
    | AgentMessage
    | AssistantMessage
    | ToolResultMessage
    | CompactionMessage
)
QueueableMessage: TypeAlias = UserMessage | SystemMessage | AgentMessage

# -- tokens -------------------------------------------------------------------------------


class Tokens(Value, frozen=True):
    """What one response measured: the whole input context (cache included) and the output."""

    input: int
    output: int

    @property
    def total(self) -> int:
        """Input plus output tokens."""
        return self.input + self.output


class Usage(Value, frozen=True):
    """Token usage of one attempt."""

    input: int
    output: int
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        """Input plus output tokens."""
        return self.input + self.output


# -- session inputs -----------------------------------------------------------------------


class ToolDescriptor(Value, frozen=True):
    """What a provider is told about one tool."""

    name: str
    description: str | None = None
    namespace: str | None = None
    namespace_description: str | None = None
    parameters: dict[str, object] | None = None  # JSON Schema of the arguments
    server: dict[str, object] | None = None  # set ⇒ provider-owned, never executed by agentkeep
    defer: bool = False
    grammar: str | None = None  # a Lark grammar; the call's raw input becomes {"input": raw}


class ModelSessionOptions(Value, frozen=True):
    """What a model session is opened with: the instructions and the tools the model may call."""

    instructions: str
    tools: tuple[ToolDescriptor, ...] = ()


class Context(Value, frozen=True):
    """The whole conversation a request runs on; the caller owns it and passes it whole."""

    instructions: str
    messages: tuple[Message, ...]


# -- compaction outcomes ------------------------------------------------------------------


class _Compaction(Value, frozen=True, tag_field="status"):
    pass


class CompactionCompleted(_Compaction, frozen=True, tag="completed"):
    """A compaction that succeeded: ``messages`` is the replacement context, ``summary`` the summary
    text if any.
    """

    messages: tuple[Message, ...]  # the replacement context
    summary: str | None = None
    usage: Usage | None = None


class CompactionCancelled(_Compaction, frozen=True, tag="cancelled"):
    """A compaction abandoned before it finished (its cancel token fired); history unchanged."""


class CompactionFailed(_Compaction, frozen=True, tag="failed"):
    """A compaction that failed (``kind`` says how, ``message`` what happened); the history is
    unchanged.
    """

    kind: Literal["inference_error", "invalid_summary", "tool_call"]
    message: str


CompactionOutcome: TypeAlias = CompactionCompleted | CompactionCancelled | CompactionFailed
