""":class:`ModuleRuntime`: one system's modules — their start (migrations, ``before_start``,
``after_start``) and the agent lifecycle hooks (created, restored, archived).

Invariants:

- A migration's work and the row recording its key (``module_migrations``) commit in one
  transaction, so a key is recorded exactly when its migration's writes are durable; a key
  is never run again once recorded.
- Module hooks join the system's :class:`~agentkeep.features.FeatureSet` (after the
  system's own features, in module order) before any agent is resumed, so every agent
  loaded at or after that point runs with them.
- The lifecycle hooks chain in module order: the transactional ones inside the caller's
  transaction (the first failure propagates and rolls it back), the post-commit ones
  isolated (a failure is logged).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from agentkeep.errors import InvalidConfigError, ModuleMigrationError, ModuleStartError
from agentkeep.features import FeatureSet
from agentkeep.logs import get_logger
from agentkeep.modules.context import AgentSnapshot, ModuleContext, ModuleDatabase
from agentkeep.modules.module import Module, ModuleHooks
from agentkeep.persistence.interface import StoreHandle, Transaction
from agentkeep.persistence.kv import ScopedKV
from agentkeep.refs import AgentSystemRef

log = get_logger(__name__)

#: A fact the lifecycle hooks report: each has a ``…_transact`` hook and a post-commit one.
Fact = Literal["agent_created", "agent_restored", "agent_archived"]

#: How long ``open`` waits for the agents it resumed to be restored before ``after_start``.
RESTORE_WAIT_SECONDS = 30.0


def check_modules(given: Sequence[Module], features: FeatureSet) -> tuple[Module, ...]:
    """The modules ``open`` was given, checked before the store is touched.

    Raises:
        InvalidConfigError: a module without a name, two with one name, a name a feature
            has, or a migration that is not a ``(key, callable)`` pair with a unique,
            non-empty key.
    """
    names: set[str] = set()
    feature_names = {f.name for f in features.features}
    for module in given:
        name = module.name
        if not isinstance(name, str) or not name:
            raise InvalidConfigError(f"a module needs a non-empty name: {module!r}")
        if name in names:
            raise InvalidConfigError(f'module names must be unique: "{name}" is given twice')
        if name in feature_names:
            raise InvalidConfigError(
                f'module "{name}" has the name of a feature: a module\'s hooks join the '
                "features under its name, so the names must differ"
            )
        names.add(name)
        keys: set[str] = set()
        for index, pair in enumerate(module.migrations):
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise InvalidConfigError(
                    f'module "{name}": migrations[{index}] must be a (key, migration) pair'
                )
            key, migration = pair
            if not isinstance(key, str) or not key:
                raise InvalidConfigError(
                    f'module "{name}": migrations[{index}] needs a non-empty string key'
                )
            if key in keys:
                raise InvalidConfigError(f'module "{name}": migration key "{key}" is repeated')
            if not callable(migration):
                raise InvalidConfigError(
                    f'module "{name}": migration "{key}" is not callable: {migration!r}'
                )
            keys.add(key)
    return tuple(given)


class ModuleRuntime:
    """The modules of one system (see the module docstring).

    Built with the system's parts; :meth:`attach` gives it the system's reference before
    :meth:`migrate`, :meth:`start` and :meth:`after_start` run (in that order, at ``open``).
    Any thread may call the lifecycle methods.

    Args:
        store: The system's store.
        modules: The checked modules, in order.
        features: The system's features: the modules' hooks join them.
    """

    def __init__(self, store: StoreHandle, modules: Sequence[Module], features: FeatureSet) -> None:
        self._store = store
        self._modules = tuple(modules)
        self._features = features
        self._hooks: tuple[ModuleHooks, ...] = ()
        self._system: AgentSystemRef | None = None
        self._loads = threading.Condition()
        self._restore_attempted: set[str] = set()

    def attach(self, system: AgentSystemRef) -> None:
        """The system's reference (no owning agent), handed to every module hook."""
        self._system = system

    @property
    def hooks(self) -> tuple[ModuleHooks, ...]:
        """The hooks the modules returned, in module order (empty before :meth:`start`)."""
        return self._hooks

    def context(self, module: str, tx: Transaction | None = None) -> ModuleContext:
        """The context of ``module``'s hook: bound to ``tx`` if given."""
        system = self._system
        assert system is not None, "attach() comes first"
        if tx is None:
            kv = ScopedKV.through(self._store, "system", "feature", module)
            return ModuleContext(
                module=module, system=system, shared_kv=kv, db=ModuleDatabase(handle=self._store)
            )
        return ModuleContext(
            module=module,
            system=system.within(tx),
            shared_kv=ScopedKV.in_transaction(tx, "system", "feature", module),
            db=ModuleDatabase(tx=tx),
        )

    # -- open ------------------------------------------------------------------------------

    def migrate(self) -> list[tuple[str, str]]:
        """Run every module's missing migrations, in module order then key order, each in
        its own transaction with its key recorded; returns the ``(module, key)`` run now.

        Raises:
            ModuleMigrationError: a migration raised (its transaction rolled back; the keys
                before it stay recorded).
        """
        applied: list[tuple[str, str]] = []
        for module in self._modules:
            name = module.name
            for key, migration in module.migrations:
                try:
                    ran = self._store.transact(self._migration_work(name, key, migration))
                except Exception as error:
                    raise ModuleMigrationError(name, key, error) from error
                if ran:
                    applied.append((name, key))
                    log.info("module_migration_applied", module=name, key=key)
        return applied

    def _migration_work(
        self, name: str, key: str, migration: Callable[[ModuleContext], None]
    ) -> Callable[[Transaction], bool]:
        def work(tx: Transaction) -> bool:
            done = tx.sql.query(
                "SELECT 1 FROM module_migrations WHERE module = ? AND key = ?", (name, key)
            )
            if done:
                return False
            migration(self.context(name, tx))
            tx.sql.execute(
                "INSERT INTO module_migrations (module, key, applied_at_ms) VALUES (?, ?, ?)",
                (name, key, time.time_ns() // 1_000_000),
            )
            return True

        return work

    def start(self) -> None:
        """Every module's ``before_start``, in order; the hooks returned join the features
        (named by their module) once all of them succeeded.

        Raises:
            ModuleStartError: a ``before_start`` raised, or returned something that is not a
                :class:`ModuleHooks` (or returned one another module returned too).
        """
        system = self._system
        assert system is not None, "attach() comes first"
        collected: list[ModuleHooks] = []
        for module in self._modules:
            try:
                hooks = module.before_start(self.context(module.name), system)
                if hooks is not None and not isinstance(hooks, ModuleHooks):
                    raise TypeError(f"before_start returned {hooks!r}, not a ModuleHooks")
                if hooks is not None and any(hooks is h for h in collected):
                    raise TypeError("before_start returned another module's hooks object")
            except Exception as error:
                raise ModuleStartError(module.name, "before_start", error) from error
            if hooks is not None:
                hooks.name = module.name  # its stores and its log lines are the module's
                collected.append(hooks)
        self._hooks = tuple(collected)
        self._features.join(collected)

    def after_start(self) -> None:
        """Every returned ``after_start``, in module order.

        Raises:
            ModuleStartError: one raised.
        """
        system = self._system
        assert system is not None, "attach() comes first"
        for hooks in self._overriding("after_start"):
            try:
                hooks.after_start(self.context(hooks.name), system)
            except Exception as error:
                raise ModuleStartError(hooks.name, "after_start", error) from error

    # -- the agent lifecycle ---------------------------------------------------------------

    def overrides(self, fact: Fact) -> bool:
        """Whether any module hooks ``fact`` (its transactional or post-commit hook)."""
        return bool(self._overriding(fact) or self._overriding(f"{fact}_transact"))

    def transact(self, fact: Fact, tx: Transaction, snapshot: AgentSnapshot) -> None:
        """``fact``'s ``…_transact`` hook of every module, in order, inside ``tx``; the first
        failure propagates (rolling ``tx`` back)."""
        hook = f"{fact}_transact"
        for hooks in self._overriding(hook):
            try:
                getattr(hooks, hook)(self.context(hooks.name, tx), snapshot)
            except Exception as error:
                log.warning("module_hook_failed", module=hooks.name, hook=hook, error=repr(error))
                raise

    def observe(self, fact: Fact, snapshot: AgentSnapshot) -> None:
        """``fact``'s post-commit hook of every module, in order; failures are logged."""
        for hooks in self._overriding(fact):
            try:
                getattr(hooks, fact)(self.context(hooks.name), snapshot)
            except Exception as error:
                log.warning("module_hook_failed", module=hooks.name, hook=fact, error=repr(error))

    def snapshot_in(self, tx: Transaction, agent_id: str) -> AgentSnapshot:
        """The agent's snapshot as ``tx`` sees it (``KeyError`` if it has no row)."""
        row = tx.agents.get(agent_id)
        if row is None:
            raise KeyError(agent_id)
        return AgentSnapshot.of(row.id, row.metadata)

    # -- restoration (an agent's first load into memory) -----------------------------------

    def restore_in(self, tx: Transaction, agent_id: str) -> AgentSnapshot:
        """The restoration's transactional hooks inside the load's transaction ``tx``;
        returns the snapshot for the post-commit hooks."""
        snapshot = self.snapshot_in(tx, agent_id)
        self.transact("agent_restored", tx, snapshot)
        return snapshot

    def restore_attempted(self, agent_id: str) -> None:
        """The agent's first load finished (restored, or failed): ``open`` stops waiting."""
        with self._loads:
            self._restore_attempted.add(agent_id)
            self._loads.notify_all()

    def wait_for_restorations(
        self, agent_ids: Iterable[str], timeout_seconds: float = RESTORE_WAIT_SECONDS
    ) -> bool:
        """Block until each agent's first load was attempted (only when some module hooks
        restoration: otherwise nothing waits). False on timeout."""
        if not self.overrides("agent_restored"):
            return True
        wanted = set(agent_ids)
        with self._loads:
            done = self._loads.wait_for(
                lambda: wanted <= self._restore_attempted, timeout=timeout_seconds
            )
        if not done:
            log.warning("module_restore_wait_timed_out", agents=sorted(wanted))
        return done

    def _overriding(self, hook: str) -> tuple[ModuleHooks, ...]:
        return tuple(h for h in self._hooks if _overrides(h, hook))


def _overrides(hooks: ModuleHooks, hook: str) -> bool:
    if hook in getattr(hooks, "__dict__", {}):
        return True
    return getattr(type(hooks), hook) is not getattr(ModuleHooks, hook)


__all__ = ["RESTORE_WAIT_SECONDS", "Fact", "ModuleRuntime", "check_modules"]
