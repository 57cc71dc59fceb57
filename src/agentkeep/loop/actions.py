"""What an action hook may return: the actions the shell carries out after the hook.

Action hooks (``before_turn``, ``after_turn``, ``after_agent_loop``, ``prepare_inference``)
return these; the shell writes them durably and tells the core what changed
(``WorkAccepted``, or ``HookFinished(compact=True)``).
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from agentkeep.errors import check_id
from agentkeep.types import JSONObject, SystemMessage, UserMessage


class _Data(msgspec.Struct, frozen=True, kw_only=True):
    pass


def check_message_id(message_id: object, field: str = "id") -> str:
    """``message_id`` if it is a valid message id (what ``send``/``steer`` and the message
    actions accept): the id rule of :mod:`agentkeep.types.ids`, 1-128 of ``[a-z0-9._-]``.

    Raises:
        InvalidIdError: (an ``InvalidMessageError``) saying "message id", naming ``field``.
    """
    return check_id(message_id, what="message id", field=field)


class _MessageAction(_Data, frozen=True):
    """A message a hook queues, with ``send``/``steer``'s ``id`` and ``metadata``.

    ``id`` makes the action idempotent: a hook that runs again after a crash (or returns the
    same action twice) and queues an id still in the conversation makes no second message
    and no second turn. ``metadata`` travels beside the message to the message-accepted hooks.
    An invalid ``id`` raises ``InvalidIdError`` (an ``InvalidMessageError``) when the action is
    made, like ``send``.
    """

    message: UserMessage | SystemMessage
    id: str | None = None
    metadata: JSONObject | None = None

    def __post_init__(self) -> None:
        if self.id is not None:
            check_message_id(self.id)


class SteerAction(_MessageAction, frozen=True):
    """Queue ``message`` on the agent's steering queue, durably, once the hook returns (in one
    transaction with the hook's other message actions); it outranks queued sends. ``id`` and
    ``metadata`` are ``steer``'s (an id already queued makes no second message)."""


class SendAction(_MessageAction, frozen=True):
    """Queue ``message`` on the agent's send queue, durably, once the hook returns (in one
    transaction with the hook's other message actions). ``id`` and ``metadata`` are
    ``send``'s (an id already queued makes no second message)."""


class CompactAction(_Data, frozen=True):
    """Compact the conversation before the loop goes on (the hook's turn or loop continues
    after the compaction landed)."""


class InjectAction(_Data, frozen=True):
    """Queue ``message`` as a system notice, durably: it owes the agent an inference and is
    appended only after pending tool results and compaction settled (after the queued input
    that joins before it), right before the inference that sees it, exactly once
    (docs/notices.md).

    ``id`` makes the action idempotent: a hook that runs again after a crash (or returns the
    same action twice) and injects an id this agent already accepted a notice under queues
    nothing. Notice ids are the agent's own (never released), apart from message ids. An
    invalid ``id`` raises ``InvalidIdError`` when the action is made.
    """

    message: SystemMessage
    id: str | None = None

    def __post_init__(self) -> None:
        if self.id is not None:
            check_message_id(self.id)


Action: TypeAlias = SteerAction | SendAction | CompactAction | InjectAction
