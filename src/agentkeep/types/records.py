"""What the runtime stores, as msgspec Structs (JSON-encoded in SQLite).

Conversation records are append-only per agent; ``position`` orders them. Rebuilding the
conversation (:func:`rebuild_messages`): a compaction record resets it, user/tool/system
records append a message, and consecutive block records extend one assistant message.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import msgspec

from agentkeep.types.content import (
    AssistantBlock,
    AssistantMessage,
    Message,
    QueueableMessage,
    SystemMessage,
    ToolCallBlock,
    ToolResultMessage,
)
from agentkeep.types.selection import MessageOptions, Settings

QueueName: TypeAlias = Literal["steering", "send"]
OwedStage: TypeAlias = Literal["inference", "tools", "compaction", "settlement"]
JSONObject: TypeAlias = dict[str, Any]


class _Record(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    pass


# -- conversation records -----------------------------------------------------------------


class _ConversationRecord(_Record, frozen=True, tag_field="type"):
    pass


class UserRecord(_ConversationRecord, frozen=True, tag="user"):
    """A consumed queue entry: the message joined the conversation. ``profile`` is the one
    it selected (durable control data, never part of what the provider sees)."""

    message_id: str
    message: QueueableMessage
    metadata: JSONObject | None = None
    profile: str | None = None


class BlockRecord(_ConversationRecord, frozen=True, tag="block"):
    """One finished assistant block; consecutive block records form one assistant message.

    ``private``: the call or result of a server tool declared ``persist_in_history=False``:
    part of the private model context (the provider sees it), never published (no ledger
    event; left out of :func:`published_messages`).
    """

    block: AssistantBlock
    private: bool = False


class ToolRecord(_ConversationRecord, frozen=True, tag="tool"):
    """One tool result, answering the call with the same provider call id."""

    message: ToolResultMessage


SystemReason: TypeAlias = Literal["notice", "handoff", "failure", "settled", "continue"]


class SystemRecord(_ConversationRecord, frozen=True, tag="system"):
    """A system message: a hook's notice, a model-switch handoff, a failure note, the note
    that ended owed work without an answer (``settled``: ``Sessions.settle``; the one system
    record owed no answer, docs/turns.md), or "Continue from where you left off." before the
    continuation of a response that was cut (``continue``: a crash or a failed stream after
    completed content, ``OwedWork.response_open``). The cut response's blocks and the
    continuation's are one assistant message: the turn's result and the ledger's ``message``
    (``loop.view.continued_blocks``). The same text before a notice that reopens a
    *finished* response is an ordinary ``notice``."""

    message: SystemMessage
    reason: SystemReason = "notice"


class CompactionRecord(_ConversationRecord, frozen=True, tag="compaction"):
    """A full replacement of everything before it; always the first record when present.

    ``owes_answer`` is True when a consumed message kept after the snapshot (or an inference
    owed before the compaction) still needs a response: that is not visible in the messages,
    so the rewrite that knew it records it here.
    """

    messages: tuple[Message, ...]
    owes_answer: bool = False


ConversationRecord: TypeAlias = (
    UserRecord | BlockRecord | ToolRecord | SystemRecord | CompactionRecord
)


def rebuild_messages(records: list[ConversationRecord]) -> list[Message]:
    """The conversation the records describe, as provider messages."""
    messages: list[Message] = []
    for record in records:
        if isinstance(record, CompactionRecord):
            messages = list(record.messages)
        elif isinstance(record, BlockRecord):
            last = messages[-1] if messages else None
            if isinstance(last, AssistantMessage):
                messages[-1] = AssistantMessage(content=(*last.content, record.block))
            else:
                messages.append(AssistantMessage(content=(record.block,)))
        else:
            messages.append(record.message)
    return messages


def published_messages(records: list[ConversationRecord]) -> list[Message]:
    """The conversation as history reads publish it: :func:`rebuild_messages` without the
    private blocks (server tools declared ``persist_in_history=False``)."""
    return rebuild_messages([r for r in records if not (isinstance(r, BlockRecord) and r.private)])


# -- archived history ---------------------------------------------------------------------

ArchiveReason: TypeAlias = Literal["model_switch", "compaction"]


class ArchivedEpoch(_Record, frozen=True):
    """A stretch of history taken out of the provider's view, kept readable until a purge.

    ``model_switch``: the whole conversation an incompatible switch restarted from empty;
    ``compaction``: the records a compaction summary replaced. ``settings`` is the selection
    in force when it was archived (None if the agent never had one).
    """

    epoch: int
    reason: ArchiveReason
    archived_at_ms: int
    records: tuple[ConversationRecord, ...] = ()
    settings: Settings | None = None


# -- queued messages ----------------------------------------------------------------------


_NO_OPTIONS = MessageOptions()


class QueuedMessage(_Record, frozen=True):
    """A message durably accepted into a queue and not yet consumed.

    ``seq`` is assigned by the store (strictly increasing per agent and queue, derived from
    the durable tail, so it never collides across restarts and never depends on a clock).
    """

    id: str
    queue: QueueName
    message: QueueableMessage
    options: MessageOptions = _NO_OPTIONS
    metadata: JSONObject | None = None
    accepted_at_ms: int = 0
    seq: int = 0


class QueuedNotice(_Record, frozen=True):
    """A system notice a hook injected; appended right before the inference that sees it."""

    message: SystemMessage
    seq: int = 0


# -- tool batches -------------------------------------------------------------------------


class PendingToolCall(_Record, frozen=True):
    """One call of a dispatched batch, durable before any call of the batch runs.

    ``internal_id`` is agentkeep's id for the call (KV scopes, hooks, claims);
    ``call.call_id`` is the provider's. ``committed`` holds a result a tool claimed with
    ``call.commit`` before the batch got to write it.
    """

    internal_id: str
    index: int
    call: ToolCallBlock
    committed: ToolResultMessage | None = None


# -- per-agent facts ----------------------------------------------------------------------


class OwedWork(_Record, frozen=True):
    """The one liveness fact: present ⇔ the agent owes work (invariant I7).

    Written with the change that made work due; erased only by the settlement transaction.

    It also carries the run's lifecycle ids (``docs/lifecycle.md``), written before
    the first hook that is told them, so a restart continues the same loop and turn:

    Attributes:
        stage: What is owed next.
        loop_id: The settled-to-settled loop (run) the work belongs to.
        turn_id: The turn within that loop.
        inference_id: The provider request the owed inference is (or will be) made under;
            None once its response finished (the id is spent) or it was retired.
        settlement_id: Unused in the owed fact (a settlement erases it): kept for old rows.
        response_open: A request committed completed content (a finished block) but its
            response never finished (the transaction that ends it did not commit), and
            nothing was appended after that content since. A restart retires the request's
            id (``inference_id`` becomes None) and continues the response after the notice
            ``Continue from where you left off.``; the transaction appending after the
            content clears it.
        stage_opened_at: The inference stage of ``inference_id`` opened: the transaction
            right before its request (``ConsumeNotices``) appended that boundary's notices,
            leaving this many records. While the conversation still has that many, a restart
            makes the request without asking for them again; once anything else was
            appended, the request is made under a new id behind its own boundary
            (docs/notices.md).
    """

    stage: OwedStage
    loop_id: str | None = None
    turn_id: str | None = None
    inference_id: str | None = None
    settlement_id: str | None = None
    response_open: bool = False
    stage_opened_at: int | None = None  # the request's boundary notices are in


class AgentEnvironment(_Record, frozen=True):
    """The machine an agent works on, as its model is told: OS version, platform, working directory
    and shell.

    :func:`agentkeep.current_environment` reads this process's; an :class:`AgentConfig` may carry
    one.
    """

    os_version: str
    platform: str
    working_directory: str
    shell: str


class AgentRow(_Record, frozen=True):
    """An agent's identity row."""

    id: str
    config: JSONObject  # the creation config (environment, features), immutable
    metadata: JSONObject = {}
    parent_id: str | None = None
    created_at_ms: int = 0
    deleted_at_ms: int | None = None


RECORD_TYPES: tuple[type[Any], ...] = (
    UserRecord,
    BlockRecord,
    ToolRecord,
    SystemRecord,
    CompactionRecord,
    MessageOptions,
    QueuedMessage,
    QueuedNotice,
    PendingToolCall,
    Settings,
    OwedWork,
    AgentEnvironment,
    AgentRow,
)


__all__ = [
    "RECORD_TYPES",
    "AgentEnvironment",
    "AgentRow",
    "ArchiveReason",
    "ArchivedEpoch",
    "BlockRecord",
    "CompactionRecord",
    "ConversationRecord",
    "JSONObject",
    "OwedStage",
    "OwedWork",
    "PendingToolCall",
    "QueueName",
    "QueuedMessage",
    "QueuedNotice",
    "SystemRecord",
    "ToolRecord",
    "UserRecord",
    "published_messages",
    "rebuild_messages",
]
