"""What ``AgentSystem.open`` does before and after it builds the system: its options
(:class:`SystemOptions`), checking them (every bad one refused with ``InvalidConfigError``
before the store is touched) and the startup turn recovery.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypedDict, TypeVar

from agentkeep.actors.supervisor import Backoff, RestartIntensity
from agentkeep.drivers.host import (
    DEFAULT_CANCEL_GRACE_SECONDS,
    DEFAULT_TURN_TIMEOUT_SECONDS,
    check_drivers,
    check_seconds,
)
from agentkeep.drivers.types import Driver
from agentkeep.errors import InvalidConfigError
from agentkeep.fault_injection import FaultInjection
from agentkeep.features import Feature, FeatureSet
from agentkeep.logs import get_logger
from agentkeep.loop.context import DEFAULT_HELD_BLOCK_SECONDS, RetryPolicy
from agentkeep.loop.plans import QueueMode
from agentkeep.modules import Module
from agentkeep.modules._runtime import check_modules
from agentkeep.partitions import Partition
from agentkeep.persistence import clock as store_clock
from agentkeep.persistence.clock import Clock
from agentkeep.persistence.store import Store
from agentkeep.providers.catalog import Providers
from agentkeep.providers.credentials import CredentialResolver, check_resolver
from agentkeep.sessions.recovery import needs_recovery, recover_turns
from agentkeep.tools import Tool, ToolSet
from agentkeep.tools.provider_tools import ProviderTool, check_provider_tools
from agentkeep.types import Settings
from agentkeep.types.ledger import DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_INPUT_BYTES

log = get_logger(__name__)

T = TypeVar("T")

_MODES = ("one-at-a-time", "all")


class SystemOptions(TypedDict, total=False):
    """The options of :meth:`AgentSystem.open <agentkeep.AgentSystem.open>`, declared once;
    each may be omitted (its default is given).

    - ``provider``, ``model``: the default selection of an agent that never chose its own
      (None: the provider's own default model).
    - ``features``: the system's features (:class:`agentkeep.Feature`); default none.
    - ``modules``: the system's modules (:class:`agentkeep.Module`), in order; default
      none. At open, after the store's own migrations, each module's missing migrations
      run (module order, then key order; each in its own transaction with its key
      recorded), then each ``before_start`` (its hooks join the features after the
      system's own, under the module's name), then the agents that owe work are restored
      and started, then each ``after_start`` (docs/modules.md). A failure of any of them
      aborts ``open`` (``ModuleMigrationError``, ``ModuleStartError``). Names are unique
      and differ from the features' names.
    - ``tools``: the system's tools (``@ak.tool``); default none.
    - ``instructions``: the system prompt every agent starts from; default ``""``.
    - ``steering_mode``, ``send_mode``: ``"one-at-a-time"`` (the default) or ``"all"``: how
      many queued messages one consumption takes from each queue.
    - ``idle_grace_seconds``: how long an agent that owes nothing keeps its actor before
      it is passivated (its durable state is untouched; accepted work starts it again);
      default 30.
    - ``resume``: False opens without starting agents that owe work (admin tools that
      touch one agent); :meth:`AgentSystem.start` resumes them later. Default True.
    - ``restart_intensity``, ``restart_backoff``: how often a crashing agent actor is
      restarted (default: at most 5 restarts in 10 s, backoff from 50 ms up to 2 s) before
      the system gives up, stops cleanly (the durable state stays) and surfaces the error
      (``AgentSystem.failure``). The same limits apply to the system supervisor, which
      restarts the store writer and the agent tier after it when the writer fails
      (``rest_for_one``, see ``agentkeep.actors.tree``).
    - ``max_event_bytes``: the bound on one ledger event's encoded data (the wire's
      ``maxEventBytes``): a message or metadata update whose event would exceed it is
      refused (``EventTooLargeError``) before anything is written.
    - ``max_input_bytes``: the bound on one input message's encoded JSON (the wire's
      ``maxInputBytes``), refused (``InputTooLargeError``) before anything is written.
    - ``drivers``: injected drivers (:class:`agentkeep.drivers.Driver`), selected by a session's
      pinned ``driver.id`` (docs/drivers.md).
    - ``turn_timeout_seconds``: the bound on one turn of an injected driver (the wire's
      ``turnTimeoutMs``; default 600).
    - ``driver_cancel_grace_seconds``: how long a cancelled driver run may take to return
      before it is abandoned (default 1).
    - ``retry_forever`` (docs/decisions.md): provider errors,
      failed compactions and fatal run-stage failures (a refused or unknown commit, a
      failed load) are retried with bounded exponential backoff — ``retry_initial_seconds``
      (default 0.1), doubling, at most ``retry_max_seconds`` (default 30) — instead of
      leaving a failure note and giving up after three failed turns (the default, False).
      The owed stage stays between attempts (committed tool effects are not replayed) and
      the turn stays ``running``; only abort, close and shutdown stop the retrying.
    - ``provider_tools``: provider-owned tools (:class:`agentkeep.ProviderTool`), declared to
      the provider beside ``tools`` and never executed; each may hide its live events
      (``visible_to_user=False``) or its history (``persist_in_history=False``).
    - ``held_block_seconds``: the bound on how long a finished block of a response may
      stay volatile (default 0.05): a block waits for the provider's next event to ride in
      the commit that event brings (a one-block reply is one commit), and is committed on
      its own if none comes within the bound (docs/lifecycle.md). 0 commits each block as
      it finishes.
    - ``testing``: fault injection for the tests and chaos campaigns only
      (:class:`agentkeep.chaos.FaultInjection`); never set it in production.
    - ``credentials``: the function that resolves a session's ``authRef`` to its secret
      (``resolver(auth_ref) -> str | None``; None: no such credential). Called when a
      session with an ``authRef`` prepares a request; the secret goes to the provider (the
      vendor adapters send it as their API key) and is never stored, logged or put on the
      ledger. Without it, or when it cannot resolve the reference, that session's turn fails
      with ``CredentialUnavailableError`` naming the reference (docs/sessions.md).
    - ``database_path``: the SQLite file (created if absent, its directory too) instead of
      ``agents.db`` in the state directory (``path``); its lock file is beside it.
    - ``now``: the clock every timestamp the runtime writes comes from (records, events,
      turns, queue entries, definitions, sessions, migrations): a function returning seconds
      since the epoch (like :func:`time.time`, the default) or an aware ``datetime``.
      Timeouts, backoffs and grace periods stay on the monotonic clock.
    - ``database``: None (the default) keeps the store in ``agents.db`` under the path; a
      ``postgresql://…`` URL (``?schema=name``, default ``agentkeep``) keeps it in that
      schema of a PostgreSQL database instead, the path then holding only the daemon's
      files and ``providers.toml`` (docs/postgres.md).
    - ``partition``: None (the default) owns the whole store; a
      :class:`~agentkeep.Partition` ``(index, count)`` (PostgreSQL only) owns that one
      partition of it: the system takes the store's lock shared and the partition's
      exclusive, restores, resumes and recovers only that partition's agents, creates agents
      only there, and refuses every write for another partition's agent (and, unless it is
      partition 0, for the registry) with ``PartitionNotOwnedError`` before anything is
      written; reads see the whole store. The store records its count at its first
      partitioned open and refuses another (docs/postgres.md, "Partitions").
    """

    provider: str | None
    model: str | None
    features: Sequence[Feature]
    modules: Sequence[Module]
    tools: Sequence[Tool[Any, Any]]
    instructions: str
    steering_mode: QueueMode
    send_mode: QueueMode
    idle_grace_seconds: float
    resume: bool
    restart_intensity: RestartIntensity | None
    restart_backoff: Backoff | None
    max_event_bytes: int
    max_input_bytes: int
    drivers: Sequence[Driver]
    turn_timeout_seconds: float
    driver_cancel_grace_seconds: float
    retry_forever: bool
    retry_initial_seconds: float
    retry_max_seconds: float
    provider_tools: Sequence[ProviderTool]
    held_block_seconds: float
    testing: FaultInjection | None
    credentials: CredentialResolver | None
    database_path: str | Path | None
    now: Clock | None
    database: str | None  # a postgresql:// URL: the store on PostgreSQL
    partition: Partition | None  # one partition of a store on PostgreSQL


_OPTIONS = frozenset(SystemOptions.__annotations__)


class OpenArguments(NamedTuple):
    """``AgentSystem.open``'s options, checked and with their defaults."""

    defaults: Settings
    features: FeatureSet
    modules: tuple[Module, ...]
    tools: list[Tool[Any, Any]]
    instructions: str
    steering_mode: QueueMode
    send_mode: QueueMode
    idle_grace_seconds: float
    resume: bool
    intensity: RestartIntensity
    backoff: Backoff
    max_event_bytes: int
    max_input_bytes: int
    drivers: list[Driver]
    turn_timeout_seconds: float
    driver_cancel_grace_seconds: float
    retry: RetryPolicy | None
    provider_tools: tuple[ProviderTool, ...]
    held_block_seconds: float
    testing: FaultInjection
    credentials: CredentialResolver | None
    database_path: Path | None
    clock: Callable[[], int] | None  # milliseconds (``persistence.clock``); None: the system's
    database: str | None  # a postgresql:// URL: the store on PostgreSQL
    partition: Partition | None  # one partition of a store on PostgreSQL (None: all of it)


def check_open_arguments(providers: Providers, options: SystemOptions) -> OpenArguments:
    """``open``'s options checked, in ``open``'s documented order of refusal.

    Raises:
        TypeError: a key that is not an option (as for an unknown keyword argument).
        InvalidConfigError: a mode, provider, feature, module, tool or driver is invalid.
        ToolDefinitionError: two tools share a name (in one namespace).
        ModelNotServedError: ``provider`` does not serve ``model``.
    """
    unknown = sorted(set(options) - _OPTIONS)
    if unknown:
        raise TypeError(f"open() got an unexpected keyword argument {unknown[0]!r}")
    steering_mode = options.get("steering_mode", "one-at-a-time")
    send_mode = options.get("send_mode", "one-at-a-time")
    for name, mode in (("steering_mode", steering_mode), ("send_mode", send_mode)):
        if mode not in _MODES:
            raise InvalidConfigError(f"{name} must be one of {_MODES}, got {mode!r}")
    provider = options.get("provider")
    model = options.get("model")
    if provider is not None and providers.get(provider) is None:
        raise InvalidConfigError(f'Provider "{provider}" is not registered.')
    if provider is not None and model is not None:
        providers.check_model(provider, model)  # ModelNotServedError for a typo
    given_tools = options.get("tools", ())
    feature_set = FeatureSet(
        _checked("features", options.get("features", ()), Feature, "an ak.Feature")
    )
    modules = check_modules(
        _checked("modules", options.get("modules", ()), Module, "an ak.Module"), feature_set
    )
    tool_set = ToolSet(_checked("tools", given_tools, Tool, "an ak.Tool (build one with @ak.tool)"))
    servers = _checked(
        "provider_tools", options.get("provider_tools", ()), ProviderTool, "an ak.ProviderTool"
    )
    check_provider_tools(tool_set, servers)
    checked_drivers = check_drivers(options.get("drivers", ()))
    timeout = check_seconds(
        "turn_timeout_seconds",
        options.get("turn_timeout_seconds", DEFAULT_TURN_TIMEOUT_SECONDS),
        zero=False,
    )
    grace = check_seconds(
        "driver_cancel_grace_seconds",
        options.get("driver_cancel_grace_seconds", DEFAULT_CANCEL_GRACE_SECONDS),
        zero=True,
    )
    retry = _retry_policy(
        options.get("retry_forever", False),
        options.get("retry_initial_seconds", 0.1),
        options.get("retry_max_seconds", 30.0),
    )
    held = check_seconds(
        "held_block_seconds",
        options.get("held_block_seconds", DEFAULT_HELD_BLOCK_SECONDS),
        zero=True,
    )
    credentials = check_resolver(options.get("credentials"))
    database_path = options.get("database_path")
    if database_path is not None and not isinstance(database_path, str | Path):
        raise InvalidConfigError(f"database_path must be a path, got {database_path!r}")
    now = options.get("now")
    partition = options.get("partition")
    if partition is not None:
        if not isinstance(partition, Partition):
            raise InvalidConfigError(
                f"partition must be an ak.Partition(index, count), got {partition!r}"
            )
        if options.get("database") is None:
            raise InvalidConfigError(
                "partition needs a store on PostgreSQL (database='postgresql://…'): a SQLite "
                "store is owned by one process whole"
            )
    return OpenArguments(
        defaults=Settings(provider=provider, model=model),
        features=feature_set,
        modules=modules,
        tools=list(given_tools),
        instructions=options.get("instructions", ""),
        steering_mode=steering_mode,
        send_mode=send_mode,
        idle_grace_seconds=options.get("idle_grace_seconds", 30.0),
        resume=options.get("resume", True),
        intensity=options.get("restart_intensity")
        or RestartIntensity(max_restarts=5, period_seconds=10.0),
        backoff=options.get("restart_backoff") or Backoff(initial_seconds=0.05, max_seconds=2.0),
        max_event_bytes=options.get("max_event_bytes", DEFAULT_MAX_EVENT_BYTES),
        max_input_bytes=options.get("max_input_bytes", DEFAULT_MAX_INPUT_BYTES),
        drivers=checked_drivers,
        turn_timeout_seconds=timeout,
        driver_cancel_grace_seconds=grace,
        retry=retry,
        provider_tools=tuple(servers),
        held_block_seconds=held,
        testing=options.get("testing") or FaultInjection(),
        credentials=credentials,
        database_path=None if database_path is None else Path(database_path),
        clock=None if now is None else store_clock.as_ms(now),
        database=options.get("database"),
        partition=partition,
    )


def _checked(name: str, given: object, kind: type[T], what: str) -> list[T]:
    """``given`` as a list of ``kind``, or ``InvalidConfigError`` naming the first element
    that is not one (checked at ``open``, not at the first turn that would use it)."""
    if isinstance(given, str | bytes) or not isinstance(given, Iterable):
        raise InvalidConfigError(f"{name} must be a list, got {type(given).__name__}")
    items = list(given)
    for index, item in enumerate(items):
        if not isinstance(item, kind):
            raise InvalidConfigError(
                f"{name}[{index}] is {item!r} ({type(item).__name__}), not {what}"
            )
    return items


#: How often opening retries the turn recovery's transaction before going on without it.
_RECOVERY_ATTEMPTS = 4


def recover_turns_at_open(store: Store, partition: Partition | None = None) -> None:
    """Run the startup turn recovery (``sessions/recovery.py``), retrying a failing store
    (a writer being restarted, an I/O error) with a short backoff. If it still fails, the
    system opens anyway — a store that fails now fails the work that follows just as clearly
    — and the turns end later: a native ``cancelling`` turn with its run's settlement or next
    answer, a driver turn when its session's runner finds it orphaned. A partition's system
    recovers only its partition's turns (another partition's owner may be running its own)."""
    for attempt in range(_RECOVERY_ATTEMPTS):
        try:
            if partition is None:  # the whole store
                if store.read(needs_recovery):
                    store.handle.transact(recover_turns)
            elif store.read(lambda tx: needs_recovery(tx, partition)):
                store.handle.transact(lambda tx: recover_turns(tx, partition))
            return
        except Exception as error:  # the next attempt, or the log below, says what failed
            if attempt == _RECOVERY_ATTEMPTS - 1:
                log.error("turn_recovery_deferred", error=repr(error))
                return
            log.warning("turn_recovery_retried", attempt=attempt + 1, error=repr(error))
            time.sleep(0.05 * 2**attempt)


def _retry_policy(forever: bool, initial: float, maximum: float) -> RetryPolicy | None:
    """The backoff of ``retry_forever`` (None: give up after three failed turns).

    Raises:
        InvalidConfigError: a bound is not a positive finite number, or the cap is below
            the initial wait.
    """
    for name, value in (("retry_initial_seconds", initial), ("retry_max_seconds", maximum)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidConfigError(f"{name} must be a number of seconds, got {value!r}")
        if not (0 < value < float("inf")):
            raise InvalidConfigError(f"{name} must be positive and finite, got {value!r}")
    if maximum < initial:
        raise InvalidConfigError(
            f"retry_max_seconds ({maximum!r}) must not be below retry_initial_seconds ({initial!r})"
        )
    if not isinstance(forever, bool):
        raise InvalidConfigError(f"retry_forever must be True or False, got {forever!r}")
    return RetryPolicy(float(initial), float(maximum)) if forever else None
