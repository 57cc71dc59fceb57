"""The state every command receives: the state directory and the output mode."""

from __future__ import annotations

from dataclasses import dataclass

import click

from agentkeep.cli.output import Output
from agentkeep.cli.runtime import Home


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
