"""The run's settlement: its id, persisted before its transactional hook, and the
``Settle`` commit (docs/lifecycle.md, "Settlement").

One settlement id per loop: allocated when the run first tries to settle, or adopted from
the owed fact at a restart's first load (``loading.lifecycle_ids``), and kept in every owed
fact written after (``LoopContext.owed_now``), so a settlement that a refused hook or a crash
put off happens under the id its hook was told. With ``after_agent_settled_transact``
overridden — the one hook told the id before the settlement is durable — a ``StageOwed``
writes it with the owed work first (stage ``settlement``); without it nothing is written:
``after_agent_settled`` is told the id only once the settlement committed.
"""

from __future__ import annotations

import msgspec

from agentkeep.loop.context import LoopContext
from agentkeep.loop.phases import Settling
from agentkeep.loop.plans import LifecycleHook, Settle, StageOwed


def settle(ctx: LoopContext) -> None:
    """Commit the settlement (``Settling`` until it lands), its id staged first if its
    transactional hook is overridden and the owed fact does not hold it yet."""
    ctx.phase = Settling()
    ids = ctx.lifecycle
    ids.settlement_id = ids.settlement_id or ctx.new_id()
    hooks: tuple[LifecycleHook, ...] = ()
    if ctx.hooked("after_agent_settled_transact"):
        owed = ctx.mirror.owed
        if owed is not None and (owed.stage, owed.settlement_id) != (
            "settlement",
            ids.settlement_id,
        ):
            staged = msgspec.structs.replace(
                owed, stage="settlement", settlement_id=ids.settlement_id
            )
            ctx.commit(StageOwed(owed=staged))
        told = ctx.ids(settlement=True)
        error = ctx.run.failure
        hooks = (LifecycleHook(hook="after_agent_settled_transact", ids=told, error=error),)
    ctx.commit(Settle(hooks=hooks))
