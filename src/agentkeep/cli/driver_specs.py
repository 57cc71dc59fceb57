"""``--drivers`` and ``AGENTKEEP_DRIVERS``: the injected drivers a command's system registers
(the wire's ``--drivers`` / ``AMALGM_AGENT_DRIVERS``; docs/drivers.md, "Drivers from the
command line").

The list is a global option (``agentkeep --drivers SPECS COMMAND``, or the environment
variable); ``serve`` and ``mcp`` also take it after their name. It is loaded when a command
opens an agent system on its home (:func:`~agentkeep.cli.runtime.open_system`: ``serve``,
``mcp``, and every command that runs turns without a daemon), so a command that only reads
never imports a driver. A command that goes through a daemon runs turns with the daemon's
drivers.

A bad spec is one line on stderr and exit 2, naming where the list came from.
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from agentkeep.cli.output import EXIT_BAD_INPUT, CliError
from agentkeep.drivers.loading import DRIVERS_ENV, DriverLoadError, load_drivers
from agentkeep.drivers.types import Driver

DRIVERS_HELP = (
    "Injected drivers to register, comma-separated: pkg.module:attr, pkg.module (its "
    "`driver`), or a file ./name.py[:attr]; each a driver, a driver class or a "
    f"zero-argument factory (default: ${DRIVERS_ENV}). "
    "`agentkeep.drivers.process` is the shipped process driver."
)


@dataclass(frozen=True)
class DriverSpecs:
    """A driver list as given, and where it came from (``--drivers`` or the variable)."""

    text: str = ""
    source: str = "--drivers"

    def load(self) -> list[Driver]:
        """The drivers, loaded now.

        Raises:
            CliError: a spec is bad (exit 2, one line naming the source and the spec).
        """
        try:
            return load_drivers(self.text)
        except DriverLoadError as error:
            raise CliError(
                f"{self.source} {error}", code=error.code, exit_code=EXIT_BAD_INPUT
            ) from None


NO_DRIVERS = DriverSpecs()


def specs_from(ctx: click.Context, value: str | None) -> DriverSpecs:
    """The group's ``--drivers`` value as :class:`DriverSpecs` (naming the variable when it
    came from there)."""
    if not value:
        return NO_DRIVERS
    source = ctx.get_parameter_source("drivers")
    from_env = source == click.core.ParameterSource.ENVIRONMENT
    return DriverSpecs(value, DRIVERS_ENV if from_env else "--drivers")


__all__ = ["DRIVERS_HELP", "NO_DRIVERS", "DriverSpecs", "specs_from"]
