"""Injected drivers (the wire's ``AgentDriver``): sessions whose pinned revision names a
driver other than ``agentkeep`` run their turns through it (docs/drivers.md).

- :mod:`~agentkeep.drivers.types`: :class:`Driver`, :class:`DriverRunRequest`,
  :class:`DriverResult`; :mod:`~agentkeep.drivers.errors`: the errors;
- :mod:`~agentkeep.drivers.context`: :class:`DriverContext` (cancel signal, ``emit``,
  ``delta``) and the checks of what a driver emits;
- :mod:`~agentkeep.drivers.runner`: one session's runner actor;
- :mod:`~agentkeep.drivers.driver_run`: a run's shared state and its child actor;
- :mod:`~agentkeep.drivers.turn_start`, :mod:`~agentkeep.drivers.turn_endings`: the
  transactions that start a turn and end it;
- :mod:`~agentkeep.drivers.host`: registration, acceptance, waking, cancel and stop;
- :mod:`~agentkeep.drivers.loading`: drivers named by text (``--drivers``,
  ``AGENTKEEP_DRIVERS``);
- :mod:`~agentkeep.drivers.process`: :class:`ProcessDriver`, a command-line harness per turn
  (:mod:`~agentkeep.drivers.process_run` runs one, under
  :mod:`~agentkeep.drivers.process_guard`); :mod:`~agentkeep.drivers.harnesses.echo` is an
  example harness.
"""

from agentkeep.drivers.context import DriverContext, DriverSignal
from agentkeep.drivers.errors import (
    DriverCancelledError,
    DriverContextClosedError,
    DriverError,
    InvalidDriverEventError,
)
from agentkeep.drivers.loading import DRIVERS_ENV, DriverLoadError, load_drivers
from agentkeep.drivers.process import ProcessDriver, ProcessDriverError, ProcessSettings
from agentkeep.drivers.types import Driver, DriverResult, DriverRunRequest

__all__ = [
    "DRIVERS_ENV",
    "Driver",
    "DriverCancelledError",
    "DriverContext",
    "DriverContextClosedError",
    "DriverError",
    "DriverLoadError",
    "DriverResult",
    "DriverRunRequest",
    "DriverSignal",
    "InvalidDriverEventError",
    "ProcessDriver",
    "ProcessDriverError",
    "ProcessSettings",
    "load_drivers",
]
