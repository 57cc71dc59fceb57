""":class:`Module` (a name, its migrations, one entry point) and :class:`ModuleHooks` (what
that entry point returns: a :class:`~agentkeep.features.Feature` with the system-level hooks
added).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

from agentkeep.errors import FeatureDefinitionError
from agentkeep.features import HOOKS, Feature
from agentkeep.modules.context import AgentSnapshot, ModuleContext
from agentkeep.refs import AgentSystemRef

#: One migration: run once, inside its own transaction, with ``ctx.db`` and
#: ``ctx.shared_kv`` bound to it.
Migration: TypeAlias = Callable[[ModuleContext], None]


class ModuleHooks(Feature):
    """Everything a module does at runtime: return one from :meth:`Module.before_start`.

    It *is* a :class:`~agentkeep.features.Feature` — every per-agent hook (``before_turn``,
    ``message_accepted_transact``, ``metadata_changed``…) is available, composed with the
    system's features by the same rules — and adds the system-level hooks below. Its
    ``name`` is set to the module's name when it joins the system (so its per-agent stores,
    ``kv`` and ``shared_kv``, are the module's). Implementations close over what
    ``before_start`` built.

    The ``…_transact`` hooks run inside the transaction that makes their fact durable, in
    module order; raising rolls that transaction back and the command raises the error.
    The post-commit hooks run after it committed; a failure is logged, never raised.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for attribute, value in vars(cls).items():
            if attribute.startswith("_") or attribute in _ALL_HOOKS or not callable(value):
                continue
            close = difflib.get_close_matches(attribute, MODULE_HOOKS, n=1, cutoff=0.8)
            if close:
                raise FeatureDefinitionError(
                    f'ModuleHooks {cls.__qualname__} defines "{attribute}", which is not a '
                    f'hook and would never run: did you mean "{close[0]}"?'
                )

    def after_start(self, ctx: ModuleContext, agents: AgentSystemRef) -> None:
        """Once at ``open``, after the agents that owe work were restored and started.
        Raising aborts ``open`` (``ModuleStartError``; the system is closed)."""
        return

    def agent_created_transact(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        """Inside the transaction that creates an agent (``create``, a session's start);
        raising rolls the creation back and the command raises the error."""
        return

    def agent_created(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        """After that creation committed; a failure is logged, never raised."""
        return

    def agent_restored_transact(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        """Inside the transaction of an agent's first load into memory (its actor built from
        the store: resumed at ``open``, woken by work, restarted after a crash); raising
        fails that load (the run fails like any failed load; ``retry_forever`` retries it)
        and the next load restores it again."""
        return

    def agent_restored(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        """After that load committed; a failure is logged, never raised."""
        return

    def agent_archived_transact(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        """Inside the transaction that archives a session; raising rolls the archival back
        and ``archive`` raises the error."""
        return

    def agent_archived(self, ctx: ModuleContext, snapshot: AgentSnapshot) -> None:
        """After that archival committed; a failure is logged, never raised."""
        return


#: The system-level hooks :class:`ModuleHooks` adds to the feature hooks.
MODULE_HOOKS: frozenset[str] = frozenset(
    name
    for name, value in vars(ModuleHooks).items()
    if callable(value) and not name.startswith("_")
)
_ALL_HOOKS = HOOKS | MODULE_HOOKS


class Module:
    """A module: a name, its ordered migrations and one entry point, :meth:`before_start`.

    Subclass it (set ``name`` and ``migrations``, override ``before_start``) or build one
    directly: ``Module("audit", migrations=[("v1", create_tables)], before_start=start)``.

    ``migrations`` are ``(key, migration)`` pairs, keys unique within the module. At each
    ``open`` every key not yet recorded runs, in order, each in its own transaction that also
    records the key — a migration runs exactly once (a crash inside it leaves nothing and it
    runs again at the next open); a failure aborts ``open`` naming the module and key. Never
    edit or reorder a released migration: add a key.
    """

    name: str = ""
    migrations: Sequence[tuple[str, Migration]] = ()

    def __init__(
        self,
        name: str | None = None,
        *,
        migrations: Sequence[tuple[str, Migration]] | None = None,
        before_start: (Callable[[ModuleContext, AgentSystemRef], ModuleHooks | None] | None) = None,
    ) -> None:
        if name is not None:
            self.name = name
        if migrations is not None:
            self.migrations = tuple(migrations)
        self._entry = before_start

    def __repr__(self) -> str:
        return f"Module({self.name!r})"

    def before_start(self, ctx: ModuleContext, agents: AgentSystemRef) -> ModuleHooks | None:
        """Runs once at ``open``, after every module's migrations and before any agent is
        restored; returns the module's hooks, or None (the module only migrates).

        Raising aborts ``open`` (``ModuleStartError``; the system is closed). The modules'
        hooks join the system only once every ``before_start`` returned: leave messaging
        agents to ``after_start`` (an agent a send starts now would run without them).
        """
        entry = getattr(self, "_entry", None)  # a subclass may skip __init__
        return None if entry is None else entry(ctx, agents)


__all__ = ["MODULE_HOOKS", "Migration", "Module", "ModuleHooks"]
