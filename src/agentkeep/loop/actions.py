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
    message: UserMessage | SystemMessage


class SendAction(_Data, frozen=True):
    message: UserMessage | SystemMessage


class CompactAction(_Data, frozen=True):
    pass


class InjectAction(_Data, frozen=True):
    message: SystemMessage


Action: TypeAlias = SteerAction | SendAction | CompactAction | InjectAction
