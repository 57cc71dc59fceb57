"""The state every command receives: the state directory and the output mode, and the
``--drivers`` option ``serve`` and ``mcp`` take after their name (it replaces the state's list)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from agentkeep.cli.driver_specs import DriverSpecs
from agentkeep.cli.output import Output
from agentkeep.cli.runtime import Home

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, kw_only=True)
class CliState:
    """Global options, resolved once by the ``agentkeep`` group."""

    home: Home
    output: Output
    log_level: str

    @property
    def json_mode(self) -> bool:
        return self.output.json_mode


pass_state = click.make_pass_decorator(CliState)


def _set_after(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """``COMMAND --drivers SPECS``: replaces the group's list for this command."""
    if value is None:
        return
    context: click.Context | None = ctx
    while context is not None:
        if isinstance(context.obj, CliState):
            home = dataclasses.replace(context.obj.home, drivers=DriverSpecs(value))
            context.obj = dataclasses.replace(context.obj, home=home)
        context = context.parent


def drivers_after() -> Callable[[F], F]:
    """The ``--drivers`` option of ``serve`` and ``mcp`` (as ``agentkeep --drivers``)."""
    return click.option(
        "--drivers",
        default=None,
        expose_value=False,
        callback=_set_after,
        help="As `agentkeep --drivers` (this list replaces that one).",
    )
