"""Opening a state directory for one command, and watching an agent work.

Read-only commands open the :class:`~agentkeep.persistence.Store` alone, so looking at a
store never runs an agent. Commands that run agents open an :class:`~agentkeep.AgentSystem`
either the documented way (``resume=True``: every agent that owes work starts) or without
resuming anything, so ``talk`` runs only the agent it talks to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from agentkeep.agent_system import AgentSystem
from agentkeep.cli.config import ProviderConfig, load_providers
from agentkeep.cli.driver_specs import NO_DRIVERS, DriverSpecs
from agentkeep.cli.output import EXIT_NOT_FOUND, CliError, Console
from agentkeep.cli.tools import DemoTools, ToolEnvironment, ToolObserver, build_tools
from agentkeep.drivers.types import Driver
from agentkeep.fault_injection import FaultInjection
from agentkeep.features import Feature, HookContext
from agentkeep.partitions import Partition
from agentkeep.persistence.faults import FaultPlan
from agentkeep.persistence.opening import open_store as open_any_store
from agentkeep.persistence.store import DATABASE_NAME, Store
from agentkeep.types import (
    Done,
    StreamEvent,
    TextDelta,
    TextEnd,
    ToolCallEnd,
    ToolCallStart,
)


@dataclass(frozen=True, kw_only=True)
class Home:
    """The state directory a command works on, the injected drivers (``--drivers``) a
    system opened on it registers (loaded by :func:`open_system`), and the PostgreSQL URL
    its store lives at (``--database`` / ``AGENTKEEP_DATABASE``; None: ``agents.db`` in the
    state directory)."""

    path: Path
    drivers: DriverSpecs = NO_DRIVERS
    database: str | None = None

    def require_store(self) -> None:
        """Raise a clear error if there is no store here yet (a server's store is checked
        when it is opened)."""
        if self.database is None and not (self.path / DATABASE_NAME).is_file():
            raise self.no_store(str(self.path))

    @staticmethod
    def no_store(where: str) -> CliError:
        """The error for a state directory (or a server's schema) without a store."""
        return CliError(
            f"There is no agentkeep store in {where}.",
            code="no_store",
            hint="Pass --home (or set AGENTKEEP_HOME), start a session with "
            "`agentkeep session start`, or try `agentkeep demo`.",
            exit_code=EXIT_NOT_FOUND,
        )


@contextmanager
def open_store(home: Home) -> Iterator[Store]:
    """The store alone (lock, no agents): for reads and admin transactions."""
    home.require_store()
    store = open_any_store(home.path, database=home.database)
    try:
        yield store
    finally:
        store.close()


@contextmanager
def open_system(
    home: Home,
    *,
    resume: bool,
    features: Sequence[Feature] = (),
    observer: ToolObserver | None = None,
    tools: ToolEnvironment | None = None,
    faults: FaultPlan | None = None,
    create: bool = False,
    drivers: Sequence[Driver] | None = None,
) -> Iterator[tuple[AgentSystem, ProviderConfig]]:
    """An agent system on ``home`` with the CLI's providers and tools.

    Args:
        home: The state directory.
        resume: Start every agent that owes work (``AgentSystem.open``); if False nothing
            starts until the command sends it something.
        features: Extra features (``talk`` adds its stream printer).
        observer: Told about every tool call.
        tools: The tool environment (defaults to one on ``home`` with ``observer``). Its
            tools are offered per agent by :class:`~agentkeep.cli.tools.DemoTools`.
        faults: Chaos testing only.
        create: Allow a state directory without a store (``create``, ``demo``).
        drivers: The injected drivers, if loaded already (default: ``home.drivers``,
            loaded now).

    Raises:
        CliError: a ``--drivers`` spec is bad (exit 2), before anything is opened.
    """
    if drivers is None:
        drivers = home.drivers.load()
    if not create:
        home.require_store()
    config = load_providers(home.path)
    environment = tools or ToolEnvironment(home=home.path, observer=observer)
    system = _open(home, config, environment, features, faults, resume, drivers, None)
    try:
        yield system, config
    finally:
        system.close()


def partition_opener(
    home: Home, *, drivers: Sequence[Driver] | None = None
) -> Callable[[Partition], AgentSystem]:
    """What opens one partition's system for ``agentkeep serve --partitions``: the same
    providers, tools and drivers as :func:`open_system` (resuming the partition's owed work),
    over ``home.database``, for the partition it is given. Each call opens a new system; its
    caller shuts it down and closes it.

    Raises:
        CliError: a ``--drivers`` spec or ``providers.toml`` is bad, before anything is opened.
    """
    if drivers is None:
        drivers = home.drivers.load()
    config = load_providers(home.path)
    environment = ToolEnvironment(home=home.path, observer=None)
    loaded = drivers
    return lambda partition: _open(home, config, environment, (), None, True, loaded, partition)


def _open(
    home: Home,
    config: ProviderConfig,
    environment: ToolEnvironment,
    features: Sequence[Feature],
    faults: FaultPlan | None,
    resume: bool,
    drivers: Sequence[Driver],
    partition: Partition | None,
) -> AgentSystem:
    demo_tools = DemoTools(build_tools(environment), config.offers_demo_tools)
    return AgentSystem.open(
        home.path,
        providers=config.providers,
        provider=config.default_provider,
        model=config.default_model,
        features=[*features, demo_tools],
        testing=FaultInjection(faults=faults),
        resume=resume,
        drivers=drivers,
        database=home.database,
        partition=partition,
    )


class StreamPrinter(Feature, ToolObserver):
    """Prints one agent's answer as it streams, and its tool calls as they run.

    Text deltas are written as they arrive; a tool call is shown when the model finished
    writing it and again when the tool returns. With ``json_lines`` every event is one JSON
    object per line instead (stable ``event`` names: ``text_delta``, ``text_end``,
    ``tool_call``, ``tool_started``, ``tool_finished``, ``response_done``).
    """

    name = "cli-stream-printer"

    def __init__(
        self,
        agent_id: str | None,
        console: Console,
        *,
        json_lines: bool = False,
        prefix: str = "",
    ) -> None:
        self.agent_id = agent_id
        self._console = console
        self._json = json_lines
        self._prefix = prefix
        self._names: dict[str, str] = {}
        self._in_text = False

    def _mine(self, agent_id: str) -> bool:
        return self.agent_id is None or agent_id == self.agent_id

    def _emit(self, value: dict[str, Any]) -> None:
        self._console.line(msgspec.json.encode(value).decode())

    def on_event(self, ctx: HookContext, event: StreamEvent) -> None:
        if not self._mine(ctx.agent_id):
            return
        if isinstance(event, TextDelta):
            if self._json:
                self._emit({"event": "text_delta", "agent_id": ctx.agent_id, "delta": event.delta})
            else:
                if not self._in_text:
                    self._console.start_line(f"{self._prefix}assistant: ")
                    self._in_text = True
                self._console.write(event.delta)
        elif isinstance(event, TextEnd):
            self._in_text = False
            if self._json:
                self._emit({"event": "text_end", "agent_id": ctx.agent_id, "text": event.text})
            else:
                self._console.write("\n")
        elif isinstance(event, ToolCallStart):
            self._names[event.call_id] = event.name
        elif isinstance(event, ToolCallEnd):
            name = self._names.get(event.call_id, "?")
            if self._json:
                self._emit(
                    {
                        "event": "tool_call",
                        "agent_id": ctx.agent_id,
                        "call_id": event.call_id,
                        "name": name,
                        "arguments": event.arguments,
                    }
                )
            else:
                self._console.line(f"{self._prefix}  → {name}({event.arguments})")
        elif isinstance(event, Done):
            if self._json:
                self._emit(
                    {
                        "event": "response_done",
                        "agent_id": ctx.agent_id,
                        "state": event.state,
                        "message": event.message,
                    }
                )
            elif event.state in ("error", "cancelled"):
                detail = f": {event.message}" if event.message else ""
                self._console.line(f"{self._prefix}  (response {event.state}{detail})")

    def tool_started(self, agent_id: str, name: str, arguments: str) -> None:
        if not self._mine(agent_id):
            return
        if self._json:
            self._emit({"event": "tool_started", "agent_id": agent_id, "name": name})
        else:
            self._console.line(f"{self._prefix}    ⚙ running {name}…")

    def tool_finished(self, agent_id: str, name: str, result: str) -> None:
        if not self._mine(agent_id):
            return
        if self._json:
            self._emit(
                {"event": "tool_finished", "agent_id": agent_id, "name": name, "result": result}
            )
        else:
            self._console.line(f"{self._prefix}    ✓ {name} → {result}")
