"""What ``AgentSystem.open`` does before and after it builds the system: checking its
arguments (every bad one refused with ``InvalidConfigError`` before the store is touched) and
the startup turn recovery.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple, TypeVar

from agentkeep.drivers.host import check_drivers, check_seconds
from agentkeep.drivers.types import Driver
from agentkeep.errors import InvalidConfigError
from agentkeep.features import Feature, FeatureSet
from agentkeep.logs import get_logger
from agentkeep.loop.context import DEFAULT_HELD_BLOCK_SECONDS, RetryPolicy
from agentkeep.persistence.store import Store
from agentkeep.providers.registry import Providers
from agentkeep.sessions.recovery import needs_recovery, recover_turns
from agentkeep.tools import Tool, ToolSet
from agentkeep.tools.provider_tools import ProviderTool as ServerTool
from agentkeep.tools.provider_tools import check_provider_tools as check_server_tools

log = get_logger(__name__)

T = TypeVar("T")

_MODES = ("one-at-a-time", "all")


class OpenArguments(NamedTuple):
    """``AgentSystem.open``'s arguments that checking turns into something else."""

    features: FeatureSet
    drivers: list[Driver]
    turn_timeout_seconds: float
    driver_cancel_grace_seconds: float
    retry: RetryPolicy | None
    server_tools: tuple[ServerTool, ...] = ()
    held_block_seconds: float = DEFAULT_HELD_BLOCK_SECONDS


def check_open_arguments(
    *,
    providers: Providers,
    provider: str | None,
    model: str | None,
    features: object,
    tools: object,
    steering_mode: object,
    send_mode: object,
    drivers: object,
    turn_timeout_seconds: object,
    driver_cancel_grace_seconds: object,
    retry_forever: bool,
    retry_initial_seconds: float,
    retry_max_seconds: float,
    server_tools: object = (),
    held_block_seconds: object = DEFAULT_HELD_BLOCK_SECONDS,
) -> OpenArguments:
    """``open``'s arguments checked, in ``open``'s documented order of refusal.

    Raises:
        InvalidConfigError: a mode, provider, feature, tool or driver is invalid.
        ToolDefinitionError: two tools share a name (in one namespace).
        ModelNotServedError: ``provider`` does not serve ``model``.
    """
    for name, mode in (("steering_mode", steering_mode), ("send_mode", send_mode)):
        if mode not in _MODES:
            raise InvalidConfigError(f"{name} must be one of {_MODES}, got {mode!r}")
    if provider is not None and providers.get(provider) is None:
        raise InvalidConfigError(f'Provider "{provider}" is not registered.')
    if provider is not None and model is not None:
        providers.check_model(provider, model)  # ModelNotServedError for a typo
    feature_set = FeatureSet(_checked("features", features, Feature, "an ak.Feature"))
    tool_set = ToolSet(_checked("tools", tools, Tool, "an ak.Tool (build one with @ak.tool)"))
    servers = _checked("server_tools", server_tools, ServerTool, "an ak.ServerTool")
    check_server_tools(tool_set, servers)
    checked_drivers = check_drivers(drivers)
    timeout = check_seconds("turn_timeout_seconds", turn_timeout_seconds, zero=False)
    grace = check_seconds("driver_cancel_grace_seconds", driver_cancel_grace_seconds, zero=True)
    retry = _retry_policy(retry_forever, retry_initial_seconds, retry_max_seconds)
    held = check_seconds("held_block_seconds", held_block_seconds, zero=True)
    return OpenArguments(feature_set, checked_drivers, timeout, grace, retry, tuple(servers), held)


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


_RECOVERY_ATTEMPTS = 4


def recover_turns_at_open(store: Store) -> None:
    """Run the startup turn recovery (``sessions/recovery.py``), retrying a failing store
    (a writer being restarted, an I/O error) with a short backoff. If it still fails, the
    system opens anyway — a store that fails now fails the work that follows just as clearly
    — and the turns end later: a native ``cancelling`` turn with its run's settlement or next
    answer, a driver turn when its session's runner finds it orphaned."""
    for attempt in range(_RECOVERY_ATTEMPTS):
        try:
            if store.read(needs_recovery):
                store.handle.transact(recover_turns)
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
