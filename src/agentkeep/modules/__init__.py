"""Modules: a name, ordered migrations and one entry point that returns the module's hooks.

A :class:`Module` extends a system without forking it. At ``AgentSystem.open(...,
modules=[...])``, after the store's own migrations, each module's missing migrations run (in
module order, then key order; each in its own transaction with its key recorded); then each
``before_start`` runs, and the :class:`ModuleHooks` it returns — a
:class:`~agentkeep.features.Feature` with the system-level hooks added — joins the system's
features after the system's own, in module order, under the module's name; then the agents
that owe work are restored and started; then each ``after_start`` runs (docs/modules.md).

Import every name from here (``Module`` and ``ModuleHooks`` also from ``agentkeep``). The
package's modules, each importing only those listed before it: :mod:`.context` (what the
hooks are handed: :class:`ModuleContext`, :class:`ModuleDatabase`, :class:`AgentSnapshot`),
:mod:`.module` (:class:`Module`, :class:`ModuleHooks`) and :mod:`._runtime` (one system's
modules at open and through the agent lifecycle: private to the runtime).
"""

from agentkeep.modules.context import AgentSnapshot, ModuleContext, ModuleDatabase
from agentkeep.modules.module import MODULE_HOOKS, Migration, Module, ModuleHooks

__all__ = [
    "MODULE_HOOKS",
    "AgentSnapshot",
    "Migration",
    "Module",
    "ModuleContext",
    "ModuleDatabase",
    "ModuleHooks",
]
