"""What an action hook may return: the actions the shell carries out after the hook.

Action hooks (``before_turn``, ``after_turn``, ``after_agent_loop``, ``prepare_inference``)
return these; the shell writes them durably and tells the core what changed
(``WorkAccepted``, or ``HookFinished(compact=True)``).
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from agentkeep.model import SystemMessage, UserMessage


class _Data(msgspec.Struct, frozen=True, kw_only=True):
    pass


class SteerAction(_Data, frozen=True):
    """Queue ``message`` on the agent's steering queue, durably, once the hook returns (in one
    transaction with the hook's other message actions); it outranks queued sends."""

    message: UserMessage | SystemMessage


class SendAction(_Data, frozen=True):
    """Queue ``message`` on the agent's send queue, durably, once the hook returns (in one
    transaction with the hook's other message actions)."""

    message: UserMessage | SystemMessage


class CompactAction(_Data, frozen=True):
    """Compact the conversation before the loop goes on (the hook's turn or loop continues
    after the compaction landed)."""


class InjectAction(_Data, frozen=True):
    """Queue ``message`` as a system notice, durably: it owes the agent an inference and
    enters the conversation after the queued input (spec §3.12: notices are consumed last)."""

    message: SystemMessage


Action: TypeAlias = SteerAction | SendAction | CompactAction | InjectAction
