"""How ``agentkeep demo`` and ``agentkeep demo --daemon`` tell what they do: numbered steps, each
followed by the lines it says, indented under its title."""

from __future__ import annotations

from agentkeep.cli.output import Console

# The indent of a step's lines: under the title, past "1. ".
INDENT = "   "


class Narrator:
    """Prints a demo's steps on ``console``."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def step(self, number: int, title: str) -> None:
        """Start step ``number``: a blank line, then ``N. title``."""
        self.console.line("")
        self.console.line(f"{number}. {title}")

    def say(self, text: str) -> None:
        """A line of the current step, indented under its title."""
        self.console.line(f"{INDENT}{text}")
