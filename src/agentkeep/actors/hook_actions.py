"""Accepting what a hook decided (its steer, send and inject actions) from inside the loop.

The same acceptance transaction as every other message
(:func:`agentkeep.delivery.accept_message`, which the system's ``Acceptance`` runs too),
without the rest of that path: a hook's actions target the agent whose loop runs the hook,
so there is no admission to take (close waits for that loop to go idle), no claim to consume
under (the agent is busy) and no actor to tell (the loop learns what was accepted from the
events returned here).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agentkeep.delivery import accept_message, accept_notice
from agentkeep.loop.actions import Action, InjectAction, SendAction, SteerAction
from agentkeep.loop.events import WorkAccepted
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.persistence.kv_keys import escape_segment
from agentkeep.runtime.kv_areas import NOTICE_AREA, area_prefix
from agentkeep.types import MessageOptions


def accept_hook_actions(
    store: StoreHandle, agent_id: str, actions: Sequence[Action], *, new_id: Callable[[], str]
) -> list[WorkAccepted]:
    """Accept a hook decision's steer/send/inject actions for ``agent_id`` in one transaction
    (so a caller arriving meanwhile lands before or after all of them, invariant I2); other
    actions are ignored here. A message action whose ``id`` is already durable, or an
    inject whose ``id`` this agent already accepted a notice under, is an idempotent repeat
    (a hook run again after a crash): nothing is written for it.
    Returns the events that tell the loop what was accepted.
    Raises what the store raised (nothing was accepted)."""
    writes = [a for a in actions if isinstance(a, SteerAction | SendAction | InjectAction)]
    if not writes:
        return []

    def work(tx: Transaction) -> list[WorkAccepted]:
        accepted: list[WorkAccepted] = []
        for action in writes:
            if isinstance(action, InjectAction):
                if action.id is None or tx.kv.write_if_absent(
                    area_prefix(agent_id, NOTICE_AREA) + escape_segment(action.id), True
                ):
                    notice = accept_notice(tx, agent_id, action.message)
                    accepted.append(WorkAccepted(notice=notice))
                continue
            _, queued = accept_message(
                tx,
                agent_id,
                queue="steering" if isinstance(action, SteerAction) else "send",
                message=action.message,
                message_id=action.id if action.id is not None else new_id(),
                options=MessageOptions(),
                metadata=action.metadata,
            )
            if queued is not None:
                accepted.append(WorkAccepted(message=queued))
        return accepted

    return store.transact(work)
